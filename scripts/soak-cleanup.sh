#!/usr/bin/env bash
# Runs the tests whose setup and cleanup depend on timing (the demo's
# signal handling, the hangfs FUSE server) many times in a row and checks,
# after every run, that nothing is left behind: cgroups, mounts, FUSE
# connections, processes (in D state or any other), mounts and files in the
# run's temporary folder.
# Root. Usage: scripts/soak-cleanup.sh [RUNS] (default 20); SOAK_TESTS
# overrides the list ("package:regexp" words). Exit status 1 at the first
# run that fails or leaves something.
set -euo pipefail

runs=${1:-20}
tests=${SOAK_TESTS:-"./e2e/:^TestDemoCleansUpOnSignals$ ./internal/testutil/hangfs/:."}
go=${GO:-go}
cd "$(dirname "$0")/.."

cgmount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
# Other tests may run on the machine at the same time: what counts is what
# these tests made. Each run gets its own TMPDIR, which every process it
# starts inherits, and in which its folders and mounts live.
cgroups() {
	# The cgroups these tests name (the demo's), in the v2 hierarchy and
	# the v1 freezer.
	for root in "$cgmount" /sys/fs/cgroup/freezer; do
		[ -d "$root" ] && find "$root" -maxdepth 4 -type d -name "${SOAK_CGROUPS:-gracewatch-demo-*}" 2>/dev/null
	done | sort
}
procs() {
	# Processes started by the run, in any state (D included): their
	# environment holds its TMPDIR.
	local tmp=$1 p
	for p in /proc/[0-9]*; do
		if { tr "\0" "\n" <"$p/environ"; } 2>/dev/null | grep -qxF "TMPDIR=$tmp"; then
			echo "${p#/proc/} $(cat "$p/comm" 2>/dev/null) state $(awk '{print $3}' "$p/stat" 2>/dev/null)"
		fi
	done
}
mounts() { awk -v t="$1" 'index($5, t) == 1 { print $5, $9 }' /proc/self/mountinfo; }
fuseconns() {
	# FUSE connections that no mount holds (an aborted or stuck one).
	local c
	for c in $(ls /sys/fs/fuse/connections 2>/dev/null); do
		awk -v d="0:$c" '$3 == d { found = 1 } END { exit !found }' /proc/self/mountinfo || echo "$c"
	done | sort
}
dstate() { ps -eo stat=,pid=,comm= | awk '$1 ~ /^D/ { print $2, $3 }' | sort; }

snapshot() { { echo "## cgroups"; cgroups; echo "## fuse connections without a mount"; fuseconns; echo "## processes"; procs "$2"; echo "## mounts"; mounts "$2"; } >"$1"; }

work=$(mktemp -d /tmp/gw-soak.XXXXXX)
test_pid=
# Stopped, the soak stops its running test first (SIGINT, then waits: a
# test binary ends its own runs and cleans up) and removes its folder only
# then, never the binaries under a test that still runs.
finish() {
	trap '' INT TERM HUP
	if [ -n "$test_pid" ]; then
		kill -INT "$test_pid" 2>/dev/null
		wait "$test_pid" 2>/dev/null
	fi
	rm -rf "$work"
}
trap finish EXIT
trap 'exit 130' INT TERM HUP
snapshot "$work/before" "$work/none"
if grep -q . <(dstate); then
	echo "soak: processes in D state before the first run (not ours, but they would hide ours):" >&2
	dstate >&2
fi

# The test binaries, built once.
for t in $tests; do
	pkg=${t%%:*}
	$go test -c -o "$work/$(basename "$pkg").test" "$pkg" >/dev/null
done

start=$(date +%s)
for i in $(seq 1 "$runs"); do
	for t in $tests; do
		pkg=${t%%:*} re=${t#*:} name=$(basename "$pkg")
		tmp="$work/tmp-$i-$name"
		mkdir "$tmp"
		t0=$(date +%s.%N)
		(cd "$pkg" && TMPDIR=$tmp CI=${CI:-} exec "$work/$name.test" -test.run "$re" -test.count 1 -test.timeout 10m >"$work/out" 2>&1) &
		test_pid=$!
		rc=0
		wait "$test_pid" || rc=$?
		test_pid=
		if [ "$rc" != 0 ]; then
			echo "soak: run $i of $pkg $re FAILED:" >&2
			tail -50 "$work/out" >&2
			exit 1
		fi
		t1=$(date +%s.%N)
		# A cleanup in the background (a FUSE server's exit) is given a
		# moment, bounded, before anything counts as left behind.
		ok=0
		for _ in $(seq 1 50); do
			snapshot "$work/after" "$tmp"
			if diff -q "$work/before" "$work/after" >/dev/null && [ -z "$(ls -A "$tmp")" ]; then
				ok=1
				break
			fi
			sleep 0.1
		done
		if [ $ok = 0 ]; then
			echo "soak: run $i of $pkg $re left something behind:" >&2
			diff "$work/before" "$work/after" >&2 || true
			ls -la "$tmp" >&2
			exit 1
		fi
		rmdir "$tmp"
		printf 'soak: run %d/%d %s %s passed in %.1f s, nothing left\n' "$i" "$runs" "$pkg" "$re" "$(echo "$t1 - $t0" | bc)"
	done
done
echo "soak: $runs runs of each passed, nothing left behind ($(($(date +%s) - start)) s)"
