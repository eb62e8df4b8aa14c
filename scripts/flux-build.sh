#!/usr/bin/env bash
# Builds and installs flux-core and Fluxion (flux-sched) from the tarballs in
# ../shared/flux/ (beside the repository) into a cache folder outside the
# repository, for the Flux end-to-end tests (e2e/flux_test.go) and .ci/run.
# It follows ../shared/notes/flux-on-one-machine.md step by step.
#
#   scripts/flux-build.sh            build unless PREFIX already holds this version
#   scripts/flux-build.sh --prefix   print PREFIX only (what .ci/run and the tests use)
#   GRACEWATCH_FLUX_PREFIX=/opt/flux scripts/flux-build.sh
#
# The prefix is $GRACEWATCH_FLUX_PREFIX, by default
# /var/cache/gracewatch/flux-$FLUX_VERSION; the tests read the same variable
# with the same default (they ask this script, --prefix). An install of the same version (`flux version` run
# from the prefix, and Fluxion's install marker) is reused: a warm machine pays
# nothing, a fresh one about 6 minutes of compiling on 2 cores. The build
# packages are listed in .ci/run. Prints the prefix on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

CORE_VERSION=0.88.0-59-g4a5e79f56
SCHED_VERSION=0.54.0-8-gfd257f71
SHARED=${GRACEWATCH_SHARED:-$(cd .. && pwd)/shared}
PREFIX=${GRACEWATCH_FLUX_PREFIX:-/var/cache/gracewatch/flux-$CORE_VERSION}
JOBS=${FLUX_BUILD_JOBS:-2}
if [ "${1:-}" = --prefix ]; then
  echo "$PREFIX"
  exit 0
fi

# Debian's python: a python3 earlier on root's PATH may lack ply (see the note).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

installed() {
  [ -x "$PREFIX/bin/flux" ] || return 1
  # `flux version` prints "commands:    0.88.0-59-g4a5e79f56" among its lines.
  env -u FLUX_URI "$PREFIX/bin/flux" version 2>/dev/null | grep -Eq "^commands:[[:space:]]+$CORE_VERSION\$" || return 1
  [ -f "$PREFIX/.gracewatch-sched-$SCHED_VERSION" ]
}

if installed; then
  echo "flux-build: flux-core $CORE_VERSION and Fluxion $SCHED_VERSION already in $PREFIX"
  echo "$PREFIX"
  exit 0
fi

core_tgz=$SHARED/flux/flux-core-$CORE_VERSION.tar.gz
sched_tgz=$SHARED/flux/flux-sched-$SCHED_VERSION.tar.gz
for f in "$core_tgz" "$sched_tgz"; do
  [ -f "$f" ] || { echo "flux-build: missing $f" >&2; exit 1; }
done

SRC=$(mktemp -d "${TMPDIR:-/tmp}/gracewatch-flux-src.XXXXXX")
trap 'rm -rf "$SRC"' EXIT
mkdir -p "$PREFIX"
start=$(date +%s)

echo "flux-build: flux-core $CORE_VERSION into $PREFIX"
tar xzf "$core_tgz" -C "$SRC"
(
  cd "$SRC/flux-core-$CORE_VERSION"
  export FLUX_VERSION=$CORE_VERSION
  ./autogen.sh
  ./configure --prefix="$PREFIX" --with-systemdsystemunitdir=no --disable-docs PYTHON=/usr/bin/python3
  make -j"$JOBS"
  make install
)

echo "flux-build: Fluxion $SCHED_VERSION into $PREFIX"
tar xzf "$sched_tgz" -C "$SRC"
(
  cd "$SRC/flux-sched-$SCHED_VERSION"
  export PATH=$PREFIX/bin:$PATH PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig
  cmake -B build -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython_EXECUTABLE=/usr/bin/python3
  make -C build -j"$JOBS" sched-fluxion-resource sched-fluxion-qmanager sched-fluxion-feasibility \
    sched-fluxion-resource-module fluxion-data reapi_cli
  cmake --install build
)
touch "$PREFIX/.gracewatch-sched-$SCHED_VERSION"

installed || { echo "flux-build: $PREFIX does not hold a working flux $CORE_VERSION after the build" >&2; exit 1; }
echo "flux-build: done in $(( $(date +%s) - start ))s"
echo "$PREFIX"
