#!/usr/bin/env bash
# Builds gracewatch's packages into dist/: the .deb and .rpm of
# gracewatch-nodeagent and of gracewatch-aggregator (packaging/README.md).
#
#   packaging/build.sh          (or: make packages)
#
# Environment:
#   VERSION      version stamped into the binaries (`nodeagent version`);
#                default `git describe --tags --always --dirty`. The
#                packages' version is derived from it by packaging/version.sh.
#   GO           the go command (default: go)
#   NFPM         the nfpm command (default: go run of nfpm $NFPM_VERSION)
#   MAINTAINER   the packages' Maintainer/Packager field
#   SOURCE_DATE_EPOCH  time of every file in the packages (default: the time
#                of the HEAD commit), so that a build is reproducible
#
# A program whose cmd/ folder does not exist yet is skipped with a message;
# the script fails if none can be built.
set -euo pipefail

cd "$(dirname "$0")/.."

GO=${GO:-go}
NFPM_VERSION=v2.45.2
if [ -z "${NFPM:-}" ]; then
	NFPM="$GO run github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi
MAINTAINER=${MAINTAINER:-gracewatch maintainers <maintainers@gracewatch.example.org>}
PROGRAMS=(nodeagent aggregator)
MODULE=github.com/gracewatch/gracewatch
DIST=dist
STAGE=$DIST/.stage

log() { echo "packaging: $*" >&2; }

# Versions: the binaries carry git describe as it is, the packages a version
# dpkg and rpm order correctly (packaging/version.sh documents the mapping).
if git rev-parse --git-dir >/dev/null 2>&1; then
	: "${VERSION:=$(git describe --tags --always --dirty)}"
	: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct)}"
else
	: "${SOURCE_DATE_EPOCH:=$(date +%s)}"
fi
if [ -z "${VERSION:-}" ]; then
	log "not a git work tree: set VERSION (e.g. VERSION=v1.2.3)"
	exit 1
fi
date=$(TZ=UTC0 date -d "@$SOURCE_DATE_EPOCH" +%Y%m%d.%H%M%S)
PKG_VERSION=$(packaging/version.sh "$VERSION" "$date")
export PKG_VERSION MAINTAINER STAGE SOURCE_DATE_EPOCH

rm -rf "$STAGE"
mkdir -p "$STAGE"
rm -f "$DIST"/gracewatch-*.deb "$DIST"/gracewatch-*.rpm

# help_text prints what `BIN help` and `BIN help COMMAND` say, for every
# command that help lists (two spaces or more end a command's name).
help_text() {
	local bin=$1 cmds
	"$bin" help
	cmds=$("$bin" help | sed -n '/^commands:/,/^$/{/^  [a-z]/p}' |
		sed -E 's/^  ([a-z][a-z ]*[a-z])  +.*/\1/')
	while IFS= read -r c; do
		[ "$c" = help ] && continue
		echo
		# shellcheck disable=SC2086 # "job start" is two words
		"$bin" help $c
	done <<<"$cmds"
}

# manpage writes STAGE/p/p.8.gz from packaging/man/p.8.in and the binary's
# own help, escaped for roff.
manpage() {
	local p=$1 bin=$2 commands
	commands=$(help_text "$bin" | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g')
	# Through the environment: awk -v would interpret the backslashes.
	COMMANDS=$commands awk -v version="$PKG_VERSION" \
		-v date="$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%d)" '
		/^@COMMANDS@$/ { print ENVIRON["COMMANDS"]; next }
		{ gsub(/@VERSION@/, version); gsub(/@DATE@/, date); print }
	' "packaging/man/$p.8.in" | gzip -9n >"$STAGE/$p/$p.8.gz"
}

# changelog writes the Debian changelog of one package (a snapshot entry).
changelog() {
	local p=$1 pkg=gracewatch-$1
	{
		echo "$pkg ($PKG_VERSION-1) unstable; urgency=medium"
		echo
		echo "  * Build of gracewatch $VERSION (git describe), packaged by"
		echo "    packaging/build.sh."
		echo
		echo " -- $MAINTAINER  $(LC_ALL=C date -u -R -d "@$SOURCE_DATE_EPOCH")"
	} | gzip -9n >"$STAGE/$p/changelog.Debian.gz"
}

built=()
for p in "${PROGRAMS[@]}"; do
	pkg=gracewatch-$p
	if [ ! -d "cmd/$p" ]; then
		log "cmd/$p does not exist yet: $pkg is NOT built"
		continue
	fi
	mkdir -p "$STAGE/$p"
	log "building $p $VERSION"
	# No cgo: the binary needs no shared library, so the same one runs on
	# every glibc of the deb and rpm distributions (and group names are then
	# resolved from /etc/group only, not NSS). Position-independent, with
	# immediate binding: ASLR for the program itself, as distributions
	# harden theirs; it also keeps lintian from reading it as a static
	# binary, which it forgives Go programs only when it sees the source
	# package's golang-go build dependency.
	#
	# Except nodeagent, the client that Slurm's or Flux's epilogue runs for
	# every job: a static executable at a fixed address, because relocating
	# a position-independent one at each start cost 0.5–0.7 ms of its 3.06 ms
	# (BENCHMARKS.md, "Epilogue latency"); packaging/lintian-triage.md says
	# why its lintian error is overridden. Its daemon, nodeagentd, the
	# long-running root process, keeps ASLR.
	case $p in
	nodeagent) mode=(-buildmode=exe) ;;
	*) mode=(-buildmode=pie) ;;
	esac
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" build -trimpath "${mode[@]}" \
		-ldflags "-s -w -bindnow -X $MODULE/internal/version.Version=$VERSION" \
		-o "$STAGE/$p/$p" "./cmd/$p"
	if [ "$p" = nodeagent ]; then
		CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" build -trimpath -buildmode=pie \
			-ldflags "-s -w -bindnow -X $MODULE/internal/version.Version=$VERSION" \
			-o "$STAGE/$p/nodeagentd" ./cmd/nodeagentd
	fi
	manpage "$p" "$STAGE/$p/$p"
	changelog "$p"
	for fmt in deb rpm; do
		$NFPM package --config "packaging/nfpm-$p.yaml" --packager "$fmt" --target "$DIST/" >&2
	done
	built+=("$pkg")
done

if [ ${#built[@]} -eq 0 ]; then
	log "nothing built"
	exit 1
fi
log "version $PKG_VERSION (from $VERSION), nfpm $NFPM_VERSION:"
for f in "$DIST"/gracewatch-*.deb "$DIST"/gracewatch-*.rpm; do
	printf '  %s  %s bytes\n' "$f" "$(stat -c %s "$f")" >&2
done
if [ ${#built[@]} -ne ${#PROGRAMS[@]} ]; then
	log "built only: ${built[*]}"
fi
