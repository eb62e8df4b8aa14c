#!/usr/bin/env bash
# Tests gracewatch's packages (packaging/README.md), as root on a Debian
# machine with lintian, rpm and systemd (for systemd-analyze) installed:
#
#   packaging/test.sh          (or: make packages-test)
#
# It builds both packages in both formats (packaging/build.sh), installs,
# removes and purges each .deb on this machine and checks what each step
# leaves, inspects each .rpm, runs lintian (packaging/lintian-triage.md lists
# the warnings that stay) and systemd-analyze verify on the units. Everything
# it installs or creates is removed again on exit; it refuses to run where a
# gracewatch package is already installed. It ends with
# "packaging: N passed, M failed" and fails if M > 0.
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
PROGRAMS=(nodeagent aggregator)

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $*"; }
fail() { failed=$((failed + 1)); echo "FAIL $*"; }
# check DESCRIPTION COMMAND...: one check, passed when COMMAND succeeds.
check() {
	local desc=$1
	shift
	if "$@" >"$T/check.out" 2>&1; then
		pass "$desc"
	else
		fail "$desc"
		sed 's/^/     | /' "$T/check.out" | head -20
	fi
}
finish() {
	echo "packaging: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
die() {
	echo "packaging: $*" >&2
	fail "$*"
	finish || exit 1
}

[ "$(id -u)" -eq 0 ] || { echo "packaging: test.sh must run as root (it installs the packages)" >&2; exit 1; }
for tool in dpkg dpkg-deb dpkg-query rpm lintian systemd-analyze file "$GO"; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "packaging: $tool is missing (apt-get install lintian rpm systemd file)" >&2
		exit 1
	}
done
for p in "${PROGRAMS[@]}"; do
	if dpkg-query -W -f='${Status}' "gracewatch-$p" 2>/dev/null | grep -qv "not-installed"; then
		echo "packaging: gracewatch-$p is installed on this machine: refusing to test (and purge) over it" >&2
		exit 1
	fi
done

T=$(mktemp -d /tmp/gracewatch-packaging.XXXXXX)
user_existed=no
getent passwd gracewatch >/dev/null && user_existed=yes
group_existed=no
getent group gracewatch >/dev/null && group_existed=yes

# cleanup undoes everything the test may have done to this machine.
cleanup() {
	local p
	stop_agent
	for p in "${PROGRAMS[@]}"; do
		if dpkg-query -W -f='${Status}' "gracewatch-$p" 2>/dev/null | grep -qv "not-installed"; then
			dpkg --purge "gracewatch-$p" >/dev/null 2>&1 || true
		fi
	done
	if [ "$user_existed" = no ] && getent passwd gracewatch >/dev/null; then
		userdel gracewatch >/dev/null 2>&1 || true
	fi
	if [ "$group_existed" = no ] && getent group gracewatch >/dev/null; then
		groupdel gracewatch >/dev/null 2>&1 || true
	fi
	rm -rf "$T"
}
trap cleanup EXIT

# The installed agent, run by hand (no systemd here) on a cgroup subtree of
# its own, with the installed configuration.
agent_pid=
CG=
stop_agent() {
	if [ -n "$agent_pid" ]; then
		kill "$agent_pid" 2>/dev/null || true
		wait "$agent_pid" 2>/dev/null || true
		agent_pid=
	fi
	if [ -n "$CG" ] && [ -d "$CG" ]; then
		find "$CG" -name cgroup.kill -exec sh -c 'echo 1 >"$1"' _ {} \; 2>/dev/null || true
		sleep 0.2
		find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null || true
	fi
}

# mode_owner PATH MODE OWNER:GROUP
mode_owner() {
	local got
	got=$(stat -c '%a %U:%G' "$1") || return 1
	[ "$got" = "$2 $3" ] || { echo "$1: $got, want $2 $3"; return 1; }
}
absent() {
	if [ -e "$1" ] || [ -L "$1" ]; then
		echo "$1 exists"
		return 1
	fi
}
# contains FILE FIXED-STRING...: every string is in FILE.
contains() {
	local f=$1 s
	shift
	for s in "$@"; do
		grep -qF -- "$s" "$f" || { echo "$f lacks: $s"; return 1; }
	done
}
same() { cmp "$1" "$2"; }
# status PKG: dpkg's status of PKG, or not-installed.
status() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null || echo "not-installed"; }
is_status() { [ "$(status "$1")" = "$2" ] || { echo "$1: $(status "$1"), want $2"; return 1; }; }

# ---- the version mapping ------------------------------------------------------
version_is() {
	local got
	got=$(packaging/version.sh "$1" 20261202.135321) || return 1
	[ "$got" = "$2" ] || { echo "$1 -> $got, want $2"; return 1; }
}
check "version: a tag" version_is v1.2.3 1.2.3
check "version: a pre-release tag sorts first" version_is v1.2.3-rc.1 '1.2.3~rc.1'
check "version: commits after a tag" version_is v1.2.3-4-gabc1234 '1.2.3+git20261202.135321.4.abc1234'
check "version: no tag yet, dirty" version_is abc1234-dirty '0.0.0~git20261202.135321.abc1234.dirty'
check "version: refuses what is not git describe" bash -c '! packaging/version.sh dev 20261202.135321'
check "version: dpkg orders them" bash -c 'dpkg --compare-versions 0.0.0~git20261202.135321.abc1234 lt 1.2.3~rc.1 &&
	dpkg --compare-versions 1.2.3~rc.1 lt 1.2.3 && dpkg --compare-versions 1.2.3 lt 1.2.3+git20261202.135321.4.abc1234'

# ---- the shipped configuration matches the code -------------------------------
check "conffiles document every key with its default (go test ./packaging/)" "$GO" test -count=1 ./packaging/

# ---- build -----------------------------------------------------------------------
if ! packaging/build.sh >"$T/build.log" 2>&1; then
	cat "$T/build.log"
	die "packaging/build.sh failed"
fi
pass "packaging/build.sh"
grep '^packaging: ' "$T/build.log" | grep -v '^packaging: building' || true
# What build.sh used (the work tree may change while the test runs).
pkg_version=$(sed -n 's/^packaging: version \([^ ]*\) (from \([^)]*\)).*/\1/p' "$T/build.log")
raw_version=$(sed -n 's/^packaging: version \([^ ]*\) (from \([^)]*\)).*/\2/p' "$T/build.log")
[ -n "$pkg_version" ] || die "no version in the output of packaging/build.sh"
declare -A deb rpmf
for p in "${PROGRAMS[@]}"; do
	deb[$p]=dist/gracewatch-${p}_${pkg_version}-1_amd64.deb
	rpmf[$p]=dist/gracewatch-${p}-${pkg_version}-1.x86_64.rpm
	check "built ${deb[$p]}" test -s "${deb[$p]}"
	check "built ${rpmf[$p]}" test -s "${rpmf[$p]}"
done
for p in "${PROGRAMS[@]}"; do
	if [ ! -s "${deb[$p]}" ] || [ ! -s "${rpmf[$p]}" ]; then
		die "gracewatch-$p was not built"
	fi
done

# ---- the .debs, installed on this machine -------------------------------------
# deb_common P: the checks both packages share, while installed.
deb_common() {
	local p=$1 pkg=gracewatch-$1 doc=/usr/share/doc/gracewatch-$1
	check "$pkg: dpkg -s says installed, version $pkg_version-1" \
		bash -c "dpkg -s $pkg | grep -qx 'Status: install ok installed' && dpkg -s $pkg | grep -qx 'Version: $pkg_version-1'"
	check "$pkg: /usr/sbin/$p 0755 root:root" mode_owner "/usr/sbin/$p" 755 root:root
	check "$pkg: $p version prints $raw_version" bash -c "/usr/sbin/$p version | grep -q '^$p $raw_version '"
	check "$pkg: /etc/gracewatch/$p.toml 0644 root:root, as shipped" \
		bash -c "$(declare -f mode_owner); mode_owner /etc/gracewatch/$p.toml 644 root:root && cmp /etc/gracewatch/$p.toml packaging/etc/$p.toml"
	check "$pkg: /etc/default/$pkg 0644 root:root" mode_owner "/etc/default/$pkg" 644 root:root
	check "$pkg: conffiles are the .toml and /etc/default/$pkg" \
		bash -c "dpkg-query -W -f='\${Conffiles}\n' $pkg | awk 'NF{print \$1}' | sort | tr '\n' ' ' | grep -qx '/etc/default/$pkg /etc/gracewatch/$p.toml '"
	check "$pkg: unit and tmpfiles.d in /usr/lib, 0644" bash -c "$(declare -f mode_owner)
		mode_owner /usr/lib/systemd/system/$pkg.service 644 root:root &&
		mode_owner /usr/lib/tmpfiles.d/$pkg.conf 644 root:root &&
		cmp /usr/lib/systemd/system/$pkg.service packaging/systemd/$pkg.service"
	check "$pkg: man page, copyright, changelog.Debian.gz" bash -c "
		gzip -t /usr/share/man/man8/$p.8.gz && man -l /usr/share/man/man8/$p.8.gz 2>&1 | grep -q COMMANDS &&
		cmp $doc/copyright packaging/copyright &&
		zcat $doc/changelog.Debian.gz | head -1 | grep -qF '$pkg ($pkg_version-1)'"
}

# The node agent.
p=nodeagent pkg=gracewatch-nodeagent
check "$pkg: .deb has no Depends" bash -c "[ -z \"\$(dpkg-deb -f ${deb[$p]} Depends)\" ]"
check "$pkg: dpkg -i" dpkg -i "${deb[$p]}"
deb_common nodeagent
check "$pkg: /usr/libexec/gracewatch/nodeagentd 0755 root:root, the unit's ExecStart" bash -c "$(declare -f mode_owner)
	mode_owner /usr/libexec/gracewatch/nodeagentd 755 root:root &&
	grep -q '^ExecStart=/usr/libexec/gracewatch/nodeagentd serve ' /usr/lib/systemd/system/$pkg.service &&
	/usr/libexec/gracewatch/nodeagentd version | grep -q '^nodeagent $raw_version '"
check "$pkg: the client is a static executable, the daemon position-independent" bash -c "
	file -L /usr/sbin/nodeagent | grep -q 'statically linked' && ! file -L /usr/sbin/nodeagent | grep -q 'pie executable' &&
	file -L /usr/libexec/gracewatch/nodeagentd | grep -q 'pie executable'"
check "$pkg: nodeagent config check runs the daemon's" bash -c "
	/usr/sbin/nodeagent config check --config /etc/gracewatch/nodeagent.toml | grep -q 'is valid'"
doc=/usr/share/doc/$pkg/examples
check "$pkg: examples" bash -c "$(declare -f mode_owner)
	mode_owner $doc/slurm-epilog.sh 755 root:root && mode_owner $doc/flux-epilog.sh 755 root:root &&
	mode_owner $doc/flux-prolog.sh 755 root:root && mode_owner $doc/flux-housekeeping.toml 644 root:root"
check "$pkg: the jobtap plugin's source" bash -c "$(declare -f mode_owner)
	mode_owner $doc/flux-jobtap/gracewatch.c 644 root:root && mode_owner $doc/flux-jobtap/Makefile 644 root:root"
if [ -n "${GRACEWATCH_FLUX_PREFIX:-}" ]; then
	# As packaging/README.md says a site builds it (here in a copy: the
	# package's folder stays as installed).
	check "$pkg: the jobtap plugin builds against flux-core ($GRACEWATCH_FLUX_PREFIX)" bash -c "
		cp -r $doc/flux-jobtap $T/flux-jobtap && make -s -C $T/flux-jobtap FLUX_PREFIX=$GRACEWATCH_FLUX_PREFIX && test -s $T/flux-jobtap/gracewatch.so"
fi
check "$pkg: /var/lib/gracewatch 0700 and /run/gracewatch 0755, root" bash -c "$(declare -f mode_owner)
	mode_owner /var/lib/gracewatch 700 root:root && mode_owner /run/gracewatch 755 root:root"
check "$pkg: enabled for boot (multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/$pkg.service
# Run it as the unit would, but on a cgroup subtree of its own instead of
# the delegated cgroup, and through the shipped Slurm and Flux wrappers.
mnt=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
if [ -z "$mnt" ]; then
	fail "$pkg: agent run: no cgroup v2 mount"
else
	CG=$mnt/gracewatch-pkgtest-$$
	mkdir -p "$T/state"
	/usr/sbin/nodeagent serve --config /etc/gracewatch/nodeagent.toml --cgroup-root "$CG" \
		--socket "$T/agent.sock" --state-dir "$T/state" >"$T/agent.log" 2>&1 &
	agent_pid=$!
	for _ in $(seq 100); do [ -S "$T/agent.sock" ] && break; sleep 0.1; done
	check "$pkg: the agent starts with the shipped configuration" bash -c "[ -S $T/agent.sock ] || { cat $T/agent.log; exit 1; }"
	# shellcheck disable=SC2016 # expanded by the epilogue
	printf '#!/bin/sh\necho "epilogue of job ${SLURM_JOB_ID:-$FLUX_JOB_ID} as $(id -u)"\nexit 3\n' >"$T/epilog.real"
	chmod 0755 "$T/epilog.real"
	sed "s|/etc/slurm/epilog.real|$T/epilog.real|" $doc/slurm-epilog.sh >"$T/slurm-epilog.sh"
	sed "s|/etc/flux/system/housekeeping.real|$T/epilog.real|" $doc/flux-epilog.sh >"$T/flux-epilog.sh"
	check "$pkg: slurm-epilog.sh runs the real epilogue through the agent, with its status" bash -c "
		out=\$(GRACEWATCH_SOCKET=$T/agent.sock SLURM_JOB_ID=4242 sh $T/slurm-epilog.sh); rc=\$?
		[ \"\$out\" = 'epilogue of job 4242 as 0' ] && [ \$rc -eq 3 ] || { echo \"\$out (exit \$rc)\"; exit 1; }"
	check "$pkg: flux-epilog.sh likewise" bash -c "
		out=\$(GRACEWATCH_SOCKET=$T/agent.sock FLUX_JOB_ID=4243 sh $T/flux-epilog.sh); rc=\$?
		[ \"\$out\" = 'epilogue of job 4243 as 0' ] && [ \$rc -eq 3 ] || { echo \"\$out (exit \$rc)\"; exit 1; }"
	check "$pkg: the epilogues ran in the agent's job cgroups" bash -c "
		grep 'epilogue started' $T/agent.log | grep -qF 'cgroup=$CG/job-4242/' &&
		grep 'epilogue started' $T/agent.log | grep -qF 'cgroup=$CG/job-4243/' || { cat $T/agent.log; exit 1; }"
	check "$pkg: nodeagent status answers through the socket" /usr/sbin/nodeagent status --socket "$T/agent.sock"
	stop_agent
fi

echo "# a local change" >>/etc/gracewatch/nodeagent.toml
touch /var/lib/gracewatch/state-marker
check "$pkg: reinstall keeps a changed conffile" bash -c "dpkg -i ${deb[$p]} && tail -1 /etc/gracewatch/nodeagent.toml | grep -qx '# a local change'"
check "$pkg: dpkg -r" dpkg -r "$pkg"
check "$pkg: after remove: config-files only" is_status "$pkg" "deinstall ok config-files"
check "$pkg: after remove: binary and unit gone" bash -c "[ ! -e /usr/sbin/nodeagent ] && [ ! -e /usr/lib/systemd/system/$pkg.service ]"
check "$pkg: after remove: conffiles and state stay" \
	bash -c "[ -f /etc/gracewatch/nodeagent.toml ] && [ -f /etc/default/$pkg ] && [ -f /var/lib/gracewatch/state-marker ]"
check "$pkg: dpkg -P" dpkg -P "$pkg"
check "$pkg: after purge: not installed" bash -c "! dpkg-query -W -f='\${Status}' $pkg 2>/dev/null | grep -qv not-installed"
for f in /etc/gracewatch/nodeagent.toml /etc/default/$pkg /var/lib/gracewatch /run/gracewatch \
	/etc/systemd/system/multi-user.target.wants/$pkg.service /etc/systemd/system/$pkg.service \
	/var/lib/systemd/deb-systemd-helper-enabled/$pkg.service.dsh-also \
	/var/lib/systemd/deb-systemd-helper-masked/$pkg.service; do
	check "$pkg: after purge: $f gone" absent "$f"
done

# The aggregator.
p=aggregator pkg=gracewatch-aggregator
# user_ok: the system user looks as sysusers.d/gracewatch-aggregator.conf
# says, whoever made it.
user_ok() {
	local ent uid gid home shell
	ent=$(getent passwd gracewatch) || { echo "no user gracewatch"; return 1; }
	IFS=: read -r _ _ uid gid _ home shell <<<"$ent"
	if [ "$uid" -ge 1000 ] || [ "$uid" -le 0 ]; then
		echo "uid $uid is not a system uid"
		return 1
	fi
	[ "$(getent group gracewatch | cut -d: -f3)" = "$gid" ] || { echo "primary group is not gracewatch"; return 1; }
	[ "$home" = /var/lib/gracewatch-aggregator ] || { echo "home $home"; return 1; }
	[ "$shell" = /usr/sbin/nologin ] || { echo "shell $shell"; return 1; }
}
agg_installed() {
	deb_common aggregator
	check "$pkg: system user gracewatch ($1)" user_ok
	check "$pkg: /var/lib/gracewatch-aggregator 0750 gracewatch:gracewatch" \
		mode_owner /var/lib/gracewatch-aggregator 750 gracewatch:gracewatch
	check "$pkg: sysusers.d file" mode_owner /usr/lib/sysusers.d/$pkg.conf 644 root:root
	check "$pkg: examples" bash -c "$(declare -f mode_owner)
		mode_owner /usr/share/doc/$pkg/examples/actuator-slurm.toml 644 root:root &&
		mode_owner /usr/share/doc/$pkg/examples/actuator-flux.toml 644 root:root &&
		mode_owner /usr/share/doc/$pkg/examples/flux-actuator.sh 755 root:root &&
		mode_owner /usr/share/doc/$pkg/examples/gracewatch-alerts.yml 644 root:root"
	check "$pkg: not enabled on install (needs a mesh key first)" \
		absent /etc/systemd/system/multi-user.target.wants/$pkg.service
}
check "$pkg: .deb Depends: adduser | passwd" bash -c "[ \"\$(dpkg-deb -f ${deb[$p]} Depends)\" = 'adduser | passwd' ]"
if [ "$user_existed" = no ]; then
	check "$pkg: no user gracewatch before" bash -c '! getent passwd gracewatch'
fi
check "$pkg: dpkg -i" dpkg -i "${deb[$p]}"
agg_installed "by systemd-sysusers"
check "$pkg: dpkg -r" dpkg -r "$pkg"
check "$pkg: after remove: conffile stays, user stays" \
	bash -c "[ -f /etc/gracewatch/aggregator.toml ] && getent passwd gracewatch >/dev/null"
check "$pkg: dpkg -P" dpkg -P "$pkg"
check "$pkg: after purge: conffiles and state gone" bash -c "$(declare -f absent)
	absent /etc/gracewatch/aggregator.toml && absent /etc/default/$pkg && absent /var/lib/gracewatch-aggregator"
check "$pkg: after purge: the user stays (Debian keeps system users)" bash -c "getent passwd gracewatch >/dev/null"
check "$pkg: after purge: /etc/gracewatch gone (emptied)" absent /etc/gracewatch
check "$pkg: after purge: no deb-systemd-helper state left" bash -c "$(declare -f absent)
	absent /var/lib/systemd/deb-systemd-helper-enabled/$pkg.service.dsh-also &&
	absent /var/lib/systemd/deb-systemd-helper-masked/$pkg.service"

# Again where systemd-sysusers is missing: postinst falls back to adduser.
if [ "$user_existed" = no ]; then
	userdel gracewatch
	getent group gracewatch >/dev/null && groupdel gracewatch
	mkdir "$T/path"
	for d in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
		[ -d "$d" ] || continue
		for f in "$d"/*; do
			n=${f##*/}
			[ "$n" = systemd-sysusers ] || [ -e "$T/path/$n" ] || ln -s "$f" "$T/path/$n"
		done
	done
	check "$pkg: dpkg -i without systemd-sysusers" env PATH="$T/path" dpkg -i "${deb[$p]}"
	agg_installed "by adduser"
	check "$pkg: dpkg -P" dpkg -P "$pkg"
fi

# ---- the .rpms, inspected --------------------------------------------------------
for p in "${PROGRAMS[@]}"; do
	pkg=gracewatch-$p r=${rpmf[$p]}
	rpm -qp --info "$r" >"$T/$p.info" 2>&1 || true
	check "$pkg.rpm: --info: name, version, release, license, arch" contains "$T/$p.info" \
		"Name        : $pkg" "Version     : $pkg_version" "Release     : 1" \
		"License     : Apache-2.0" "Architecture: x86_64"
	rpm -qpl "$r" >"$T/$p.list" 2>&1 || true
	want=("/usr/sbin/$p" "/usr/lib/systemd/system/$pkg.service" "/usr/lib/tmpfiles.d/$pkg.conf"
		"/etc/gracewatch/$p.toml" "/etc/sysconfig/$pkg" "/usr/share/man/man8/$p.8.gz"
		"/usr/share/doc/$pkg/copyright" "/usr/share/doc/$pkg/README.md")
	if [ "$p" = aggregator ]; then
		want+=("/usr/lib/sysusers.d/$pkg.conf" "/usr/share/doc/$pkg/examples/actuator-slurm.toml"
			"/usr/share/doc/$pkg/examples/actuator-flux.toml" "/usr/share/doc/$pkg/examples/slurm-prolog-ctld.sh"
			"/usr/share/doc/$pkg/examples/flux-actuator.sh" "/usr/share/doc/$pkg/examples/gracewatch-alerts.yml"
			"/usr/share/doc/$pkg/examples/slurm-reservation.sh" "/usr/share/doc/$pkg/examples/reservations-slurm.toml")
	else
		want+=("/usr/libexec/gracewatch/nodeagentd" "/usr/share/doc/$pkg/examples/slurm-epilog.sh"
			"/usr/share/doc/$pkg/examples/flux-epilog.sh" "/usr/share/doc/$pkg/examples/flux-prolog.sh"
			"/usr/share/doc/$pkg/examples/flux-housekeeping.toml" "/usr/share/doc/$pkg/examples/slurm-prolog.sh"
			"/usr/share/doc/$pkg/examples/slurm-expiration.sh" "/usr/share/doc/$pkg/examples/flux-expiration.sh"
			"/usr/share/doc/$pkg/examples/flux-jobtap/gracewatch.c"
			"/usr/share/doc/$pkg/examples/flux-jobtap/Makefile")
	fi
	check "$pkg.rpm: -qpl lists its files" contains "$T/$p.list" "${want[@]}"
	check "$pkg.rpm: -qpl has no /etc/default nor Debian changelog" bash -c "! grep -E '^/etc/default/|changelog.Debian' $T/$p.list"
	check "$pkg.rpm: -qpc is the .toml and /etc/sysconfig/$pkg" \
		bash -c "[ \"\$(rpm -qpc $r | sort | tr '\n' ' ')\" = '/etc/gracewatch/$p.toml /etc/sysconfig/$pkg ' ]"
	check "$pkg.rpm: conffiles are %config(noreplace)" bash -c "
		flags=\$(rpm -qp --qf '[%{FILENAMES} %{FILEFLAGS:fflags}\n]' $r | awk '\$1 ~ /^\/etc\/(gracewatch|sysconfig)\// {print \$2}' | sort -u)
		[ \"\$flags\" = cn ] || { echo \"flags: \$flags\"; exit 1; }"
	check "$pkg.rpm: binary 0755 root root" \
		bash -c "rpm -qp --qf '[%{FILENAMES} %{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME}\n]' $r | grep -qx '/usr/sbin/$p -rwxr-xr-x root root'"
	rpm -qp --scripts "$r" >"$T/$p.scripts" 2>&1 || true
	check "$pkg.rpm: --scripts: preset on install, disable on removal, try-restart on upgrade" contains "$T/$p.scripts" \
		"postinstall scriptlet" "preuninstall scriptlet" "postuninstall scriptlet" \
		"systemctl --no-reload preset $pkg.service" "systemctl --no-reload disable --now $pkg.service" \
		"systemctl try-restart $pkg.service" "[ -d /run/systemd/system ]"
	rpm -qp --requires "$r" >"$T/$p.requires" 2>&1 || true
	if [ "$p" = aggregator ]; then
		check "$pkg.rpm: --scripts make the user" contains "$T/$p.scripts" "systemd-sysusers gracewatch-aggregator.conf" "useradd --system"
		check "$pkg.rpm: --requires is /bin/sh and /usr/sbin/useradd" \
			bash -c "[ \"\$(sort $T/$p.requires | tr '\n' ' ')\" = '/bin/sh /usr/sbin/useradd ' ]"
	else
		check "$pkg.rpm: --requires is /bin/sh" bash -c "[ \"\$(sort $T/$p.requires | tr '\n' ' ')\" = '/bin/sh ' ]"
	fi
	# The payload unpacks (into a scratch root, without scripts).
	mkdir -p "$T/rpmroot-$p"
	check "$pkg.rpm: installs into a scratch root (--noscripts --nodeps)" bash -c "
		rpm --root $T/rpmroot-$p --initdb && rpm --root $T/rpmroot-$p -i --nodeps --noscripts $r >/dev/null 2>&1 &&
		[ -x $T/rpmroot-$p/usr/sbin/$p ] && [ -f $T/rpmroot-$p/etc/sysconfig/$pkg ]"
done

# ---- lintian ------------------------------------------------------------------------
# Errors fail; a warning fails unless packaging/lintian-triage.md lists its
# tag in its table ("| `tag` | ...").
# shellcheck disable=SC2016 # backquotes of Markdown
triaged=$(sed -n 's/^| `\([a-z0-9+.-]*\)` |.*/\1/p' packaging/lintian-triage.md | sort -u)
for p in "${PROGRAMS[@]}"; do
	# TMPDIR: lintian leaves files (mldbm-elf-*) in it; $T is removed on exit.
	TMPDIR=$T lintian --no-tag-display-limit "${deb[$p]}" >"$T/lintian-$p.txt" 2>&1 || true
	grep -E '^[EWIPXO]: ' "$T/lintian-$p.txt" | sed 's/^/     /' || true
	check "gracewatch-$p: lintian ran" bash -c "! grep -qE '^(internal error|.*: command not found)' $T/lintian-$p.txt"
	check "gracewatch-$p: lintian: no error" bash -c "! grep -q '^E: ' $T/lintian-$p.txt"
	untriaged=$(sed -n 's/^W: [^:]*: \([^ ]*\).*/\1/p' "$T/lintian-$p.txt" | sort -u | comm -23 - <(echo "$triaged"))
	check "gracewatch-$p: lintian: every warning is in lintian-triage.md" bash -c "[ -z '$untriaged' ] || { echo 'not triaged: $untriaged'; exit 1; }"
done

# ---- systemd units ------------------------------------------------------------------
# systemd-analyze verify wants the ExecStart binaries and the man pages of
# Documentation=: copies of the units point at the built binaries in a
# scratch folder, and MANPATH at the built man pages.
# The binary each unit starts: the node agent's daemon, nodeagentd, is not
# its client.
declare -A unitbin=([nodeagent]=/usr/libexec/gracewatch/nodeagentd [aggregator]=/usr/sbin/aggregator)
mkdir -p "$T/units" "$T/man/man8"
for p in "${PROGRAMS[@]}"; do
	pkg=gracewatch-$p bin=${unitbin[$p]}
	staged=dist/.stage/$p/${bin##*/}
	install -m 0755 "$staged" "$T/units/${bin##*/}"
	cp "dist/.stage/$p/$p.8.gz" "$T/man/man8/"
	sed "s|$bin |$T/units/${bin##*/} |" "packaging/systemd/$pkg.service" >"$T/units/$pkg.service"
	check "$pkg.service: the copy differs only in the binary's path" \
		bash -c "diff packaging/systemd/$pkg.service $T/units/$pkg.service | grep -c '^[<>]' | grep -qx 2"
	check "$pkg.service: systemd-analyze verify prints nothing" bash -c "
		out=\$(cd $T/units && MANPATH=$T/man systemd-analyze verify $T/units/$pkg.service 2>&1)
		[ -z \"\$out\" ] || { echo \"\$out\"; exit 1; }"
	# A unit with WatchdogSec= kills a binary that does not ping; a binary
	# that pings wants the unit to use it.
	if grep -q '^WatchdogSec=' "packaging/systemd/$pkg.service"; then
		check "$pkg.service: WatchdogSec= and ${bin##*/} sends WATCHDOG=1" grep -qa 'WATCHDOG=1' "$staged"
	else
		check "$pkg.service: no WatchdogSec= and ${bin##*/} sends no WATCHDOG=1" bash -c "! grep -qa 'WATCHDOG=1' $staged"
	fi
done
u=packaging/systemd/gracewatch-nodeagent.service
check "nodeagent unit: keeps the settings epilogues depend on" bash -c "
	grep -qx KillMode=process $u && grep -qx Delegate=yes $u && grep -qx Type=notify $u && grep -qx NotifyAccess=main $u &&
	! grep -Eq '^(ProtectSystem|ProtectHome|ProtectControlGroups|ProtectKernelTunables|PrivateTmp=yes|PrivateDevices|ReadWritePaths|ProtectProc|ProcSubset|NoNewPrivileges|CapabilityBoundingSet|SystemCallFilter|RestrictAddressFamilies|MemoryDenyWriteExecute)' $u"
u=packaging/systemd/gracewatch-aggregator.service
check "aggregator unit: exposure of systemd-analyze security below 2.0" bash -c "
	score=\$(cd $T/units && systemd-analyze security --offline=true $T/units/gracewatch-aggregator.service 2>&1 |
		sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
	echo \"exposure \$score\"; awk -v s=\"\$score\" 'BEGIN { exit !(s != \"\" && s < 2.0) }'"

# ---- the copyright file names every Go module linked in --------------------------
for b in nodeagent/nodeagent nodeagent/nodeagentd aggregator/aggregator; do
	check "gracewatch-${b%/*}: copyright names every module linked into ${b#*/}" bash -c "
		missing=\$($GO version -m dist/.stage/$b | awk '\$1==\"dep\"{print \$2}' | while read -r m; do
			base=\${m%/v[0-9]*}; grep -qF \"\$base/\" packaging/copyright || echo \$m; done)
		[ -z \"\$missing\" ] || { echo \"not in packaging/copyright: \$missing\"; exit 1; }"
done

finish
