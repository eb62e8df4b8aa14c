#!/usr/bin/env bash
# Prints the deb/rpm version (the upstream part, without the package
# revision "-1") for a `git describe --tags --always --dirty` string.
#
#   version.sh [DESCRIBE [DATE]]
#
# DESCRIBE defaults to `git describe --tags --always --dirty` of the work tree,
# DATE (UTC, YYYYMMDD.HHMMSS) to the commit time of HEAD. The mapping, which
# keeps versions ordered the same way for dpkg and rpm ("~" sorts before
# anything, "+" after the release):
#
#   v1.2.3                  -> 1.2.3
#   v1.2.3-rc.1             -> 1.2.3~rc.1          (pre-release before 1.2.3)
#   v1.2.3-4-gabc1234       -> 1.2.3+git20261202.135321.4.abc1234
#   v1.2.3-rc.1-4-gabc1234  -> 1.2.3~rc.1+git20261202.135321.4.abc1234
#   abc1234 (no tag yet)    -> 0.0.0~git20261202.135321.abc1234
#   any of them + "-dirty"  -> the same + ".dirty" (or "+dirty" after a bare tag)
#
# The date comes first after "git" so that snapshots sort by commit time
# (abbreviated hashes do not sort). A leading "v" is dropped.
set -euo pipefail

describe=${1:-}
date=${2:-}
if [ -z "$describe" ]; then
	describe=$(git describe --tags --always --dirty)
fi
if [ -z "$date" ]; then
	date=$(TZ=UTC0 git log -1 --format=%cd --date=format-local:%Y%m%d.%H%M%S)
fi
if ! [[ $date =~ ^[0-9]{8}\.[0-9]{6}$ ]]; then
	echo "version.sh: bad date $date (want YYYYMMDD.HHMMSS)" >&2
	exit 1
fi

d=${describe#v}
dirty=
if [[ $d == *-dirty ]]; then
	dirty=1
	d=${d%-dirty}
fi

# A release: digits and dots, then an optional pre-release "-rc.1".
rel='([0-9]+(\.[0-9]+)*)(-([0-9A-Za-z.]+))?'
if [[ $d =~ ^${rel}-([0-9]+)-g([0-9a-f]{4,40})$ ]]; then
	v=${BASH_REMATCH[1]}
	[ -n "${BASH_REMATCH[4]}" ] && v+="~${BASH_REMATCH[4]}"
	v+="+git${date}.${BASH_REMATCH[5]}.${BASH_REMATCH[6]}"
	[ -n "$dirty" ] && v+=".dirty"
elif [[ $d =~ ^${rel}$ ]]; then
	v=${BASH_REMATCH[1]}
	[ -n "${BASH_REMATCH[4]}" ] && v+="~${BASH_REMATCH[4]}"
	[ -n "$dirty" ] && v+="+dirty"
elif [[ $d =~ ^[0-9a-f]{4,40}$ ]]; then
	v="0.0.0~git${date}.${d}"
	[ -n "$dirty" ] && v+=".dirty"
else
	echo "version.sh: cannot turn \"$describe\" into a package version" \
		"(want a tag like v1.2.3, or git describe output)" >&2
	exit 1
fi
echo "$v"
