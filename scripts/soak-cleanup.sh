#!/usr/bin/env bash
# Runs the tests whose setup and cleanup depend on timing (the demo's
# signal handling, the hangfs FUSE server) many times in a row and checks,
# after every run, that nothing is left behind: cgroups, mounts, FUSE
# connections, processes in D state, files in the run's temporary folder.
# Root. Usage: scripts/soak-cleanup.sh [RUNS] (default 20); SOAK_TESTS
# overrides the list ("package:regexp" words). Exit status 1 at the first
# run that fails or leaves something.
set -euo pipefail

runs=${1:-20}
tests=${SOAK_TESTS:-"./e2e/:^TestDemoCleansUpOnSignals$ ./internal/testutil/hangfs/:."}
go=${GO:-go}
cd "$(dirname "$0")/.."

cgmount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
cgroups() {
	# Every cgroup directory of the v2 hierarchy and of the v1 freezer (the
	# ones tests make), depth-bounded.
	for root in "$cgmount" /sys/fs/cgroup/freezer; do
		[ -d "$root" ] && find "$root" -maxdepth 4 -type d 2>/dev/null
	done | sort
}
mounts() { awk '$9 ~ /^fuse/ || $5 ~ /gracewatch|gwtest|hangfs/ { print $5, $9 }' /proc/self/mountinfo | sort; }
fuseconns() { ls /sys/fs/fuse/connections 2>/dev/null | sort; }
dstate() { ps -eo stat=,pid=,comm= | awk '$1 ~ /^D/ { print $2, $3 }' | sort; }

snapshot() { { echo "## cgroups"; cgroups; echo "## mounts"; mounts; echo "## fuse"; fuseconns; echo "## D"; dstate; } >"$1"; }

work=$(mktemp -d /tmp/gw-soak.XXXXXX)
trap 'rm -rf "$work"' EXIT
snapshot "$work/before"
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
		if ! (cd "$pkg" && TMPDIR=$tmp CI=${CI:-} "$work/$name.test" -test.run "$re" -test.count 1 -test.timeout 10m >"$work/out" 2>&1); then
			echo "soak: run $i of $pkg $re FAILED:" >&2
			tail -50 "$work/out" >&2
			exit 1
		fi
		t1=$(date +%s.%N)
		# A cleanup in the background (a FUSE server's exit) is given a
		# moment, bounded, before anything counts as left behind.
		ok=0
		for _ in $(seq 1 50); do
			snapshot "$work/after"
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
