#!/usr/bin/env bash
# gracewatch demo: a local cluster on loopback — one aggregator and three node
# agents, each with its own state dir, socket and cgroup root, joined in an
# encrypted memberlist mesh. Three jobs end at once: node1's epilogue is
# normal, node2's slow but within grace, node3's truly hung. The scheduler's
# view is printed from the aggregator's /v1/watch as it changes, until node3
# is DOWN with its diagnosis.
#
# Needs root, cgroup v2, python3 and go (it builds the FUSE test server), and
# bin/ built (make demo builds it; DEMO_BIN names another folder). With
# /dev/fuse the hung epilogue reads a FUSE file whose reads never answer (a
# process SIGKILL cannot end); without it, a process that ignores SIGTERM.
#
# Everything it makes (cgroups gracewatch-demo-<pid>-node{1,2,3}, the FUSE
# mount and its server, the processes it started, the temporary folder with
# admin.token and mesh.key) is removed at any exit: the end, an error, or any
# signals, however many and however close together (Ctrl-C twice, SIGTERM,
# SIGHUP). A signal ends the demo with status 0. Only SIGKILL leaves things
# behind. The FUSE connection is aborted (fusectl) before anything else is
# stopped, so that nothing waits on the mount, not even a server that
# SIGKILL cannot end; every other step is bounded in wall-clock time, and a
# process that does not end is reported, never waited for. e2e/demo_test.go
# checks it.
#
# A signal that was ignored when the demo started (nohup ignores SIGHUP, a
# script's background job SIGINT) cannot be trapped by bash: it stays
# ignored, and does not stop the demo.
#
# DEMO_HOLD=1 (the default when standard input is a terminal) keeps the
# cluster running for you to explore until Ctrl-C; DEMO_HOLD=0 (the default
# without a terminal, as in CI or a pipe) stops after the diagnosis.
# DEMO_GRACE sets the grace period (6s).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${DEMO_BIN:-$PWD/bin}
HOLD=${DEMO_HOLD:-$([ -t 0 ] && echo 1 || echo 0)}
GRACE=${DEMO_GRACE:-6s}

# The demo's own output, kept on fds 8 and 9: a signal's trap runs with the
# redirections of the command it interrupted (na ... >/dev/null), and what
# cleanup says must still be seen.
exec 8>&1 9>&2
T=
MNT=
PIDS=()    # everything the demo starts, by pid: aggregator, agents, watcher, epilog wrappers
FUSE_PID=
FG=        # the command fg waits for
STOPPING=  # the signal that stopped the demo, once one did
CLEANING=  # set once cleanup has begun
LEFT=()    # what cleanup could not remove

# fg CMD...: runs CMD and waits for it, as the foreground does, but in the
# background: bash runs a signal's trap only once a foreground command has
# ended (a client waiting for an agent that the signal stopped would hold it
# up to its --connect-wait), while `wait` returns to the trap at once, and
# cleanup stops CMD.
fg() {
  local rc=0
  "$@" &
  FG=$!
  wait "$FG" || rc=$?
  FG=
  return "$rc"
}

die() {
  echo "demo: $*" >&2
  exit 1
}

# pstat PID: sets PST (state letter) and PPARENT (parent pid) from
# /proc/PID/stat with builtins only (no fork: cleanup runs it in loops, on
# a machine that may be loaded); fails when PID is gone.
pstat() {
  local line
  { read -r line <"/proc/$1/stat"; } 2>/dev/null || return 1
  line=${line##*) }
  PST=${line%% *}
  line=${line#* }
  PPARENT=${line%% *}
}

# ours PID: whether PID is still a child of this shell (a pid that ended
# may have been reused by another process, which must not be signalled).
ours() { pstat "$1" && [ "$PPARENT" = "$$" ]; }

# alive PID...: whether one of the pids is still running (not gone, not a
# zombie waiting to be reaped).
alive() {
  local p
  for p in "$@"; do
    pstat "$p" && [ "$PST" != Z ] && return 0
  done
  return 1
}

# now_us: sets NOW to the wall-clock time in microseconds (a builtin
# clock: the bounds below are wall time, not counts of loop turns, which a
# loaded machine stretches).
now_us() { NOW=${EPOCHREALTIME//[!0-9]/}; }

# within SECONDS CMD...: runs CMD every 50 ms until it succeeds, for at most
# SECONDS of wall-clock time; fails if it never did.
within() {
  local end
  now_us
  end=$((NOW + $1 * 1000000))
  shift
  until "$@"; do
    now_us
    [ "$NOW" -lt "$end" ] || return 1
    sleep 0.05
  done
}

gone() { ! alive "$@"; }

# children: sets KIDS to the pids of this shell's children (what a signal
# may have left unrecorded: one that came between `cmd &` and `PIDS+=($!)`).
children() {
  local d
  KIDS=()
  for d in /proc/[0-9]*; do
    pstat "${d#/proc/}" && [ "$PPARENT" = "$$" ] && KIDS+=("${d#/proc/}")
  done
  return 0
}

# describe PID: a line on a process that does not end, for the report.
describe() {
  local wchan=? cmd=?
  { read -r wchan <"/proc/$1/wchan"; } 2>/dev/null
  { read -r -d '' cmd <"/proc/$1/cmdline"; } 2>/dev/null
  pstat "$1"
  echo "process $1 ($cmd) in state $PST, in $wchan"
}

# stop_procs SECONDS PID...: SIGTERM those pids that are this shell's
# children, wait up to SECONDS for them to end, SIGKILL what is left, wait
# up to 5 s more, and reap those that ended. A process that SIGKILL does
# not end (one in D) is never waited for (bash's wait has no bound): it
# goes to LEFT.
stop_procs() {
  local secs=$1 p mine=()
  shift
  for p in "$@"; do ours "$p" && mine+=("$p"); done
  [ ${#mine[@]} -gt 0 ] || return 0
  kill -TERM "${mine[@]}" 2>/dev/null
  within "$secs" gone "${mine[@]}"
  for p in "${mine[@]}"; do alive "$p" && kill -KILL "$p" 2>/dev/null; done
  within 5 gone "${mine[@]}"
  for p in "${mine[@]}"; do
    if alive "$p"; then
      LEFT+=("$(describe "$p")")
    else
      wait "$p" 2>/dev/null
    fi
  done
  return 0
}

# fuse_minor: sets MINOR to the device minor of the mount at $T/fuse (its
# FUSE connection's number), from mountinfo, without touching the mount
# (a stat of a mount that nobody serves waits for ever); empty if none.
fuse_minor() {
  local _a _b dev _c mp _d
  MINOR=
  while read -r _a _b dev _c mp _d; do
    [ "$mp" = "$T/fuse" ] && MINOR=${dev#*:}
  done </proc/self/mountinfo
  return 0
}

# abort_fuse: aborts the FUSE connection of $T/fuse through fusectl. The
# kernel then fails every request on it, taken by the server or not: the
# hung reader's, and one of the server's own (go-fuse opens a file in its
# mount while it mounts; a server killed then stays in D for ever). The
# server then ends by itself. fusectl is used where it is mounted, else
# mounted in a mount namespace of its own (unshare -m: private, gone with
# the command). Fails if there is a mount and its connection could not be
# aborted.
abort_fuse() {
  [ -n "$T" ] || return 0
  fuse_minor
  [ -n "$MINOR" ] || return 0
  if grep -q ' /sys/fs/fuse/connections [^ ]* - fusectl ' /proc/self/mountinfo &&
    { echo 1 >"/sys/fs/fuse/connections/$MINOR/abort"; } 2>/dev/null; then
    return 0
  fi
  unshare -m sh -c 'grep -q " /sys/fs/fuse/connections .* - fusectl " /proc/self/mountinfo ||
    mount -t fusectl fusectl /sys/fs/fuse/connections || exit 1
    echo 1 >"/sys/fs/fuse/connections/$1/abort"' sh "$MINOR" 2>/dev/null
}

# emptied CGROUP...: whether none of the cgroups holds processes any more.
emptied() {
  local cg
  for cg in "$@"; do
    [ -d "$cg" ] || continue
    grep -q '^populated 0' "$cg/cgroup.events" 2>/dev/null || return 1
  done
  return 0
}

# removed CGROUP...: removes the cgroups, innermost first; whether all are gone.
removed() {
  local cg
  for cg in "$@"; do
    [ -d "$cg" ] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  for cg in "$@"; do [ -d "$cg" ] && return 1; done
  return 0
}

# cleanup runs once, at any exit: the end of the demo, an error, or a
# signal (on_signal calls it). From its first line on, signals are ignored,
# by this shell and by every command it runs, so that nothing can cut it
# short. Every step is bounded in wall-clock time, and none can wait on
# the FUSE mount: its connection is aborted first.
cleanup() {
  local rc=$? n f cgs=()
  # Only the demo's own shell cleans up. A subshell (a pipeline's element,
  # a command substitution) still holds the traps' text, and bash runs the
  # EXIT trap in one that a signal ends before it has exec'd its command:
  # it must not stop the demo's processes behind the main shell's back.
  [ "$BASHPID" = "$$" ] || exit "$rc"
  trap '' INT TERM HUP QUIT PIPE
  # A signal's trap that bash ran before the line above, in this very
  # function, ran a whole cleanup and exited; one after it sees CLEANING.
  [ -z "$CLEANING" ] || return 0
  CLEANING=1
  trap - EXIT
  set +e
  exec 1>&8 2>&9
  if [ -n "$STOPPING" ]; then
    echo
    echo "demo: stopping (SIG$STOPPING)"
    rc=0
  fi
  abort_fuse
  local aborted=$?
  # The agents wait [api] stop_wait (2 s here) for the epilog streams.
  # (bash's notes of children that a signal ended go to /dev/null.)
  children
  stop_procs 10 ${FG:+"$FG"} "${PIDS[@]}" ${FUSE_PID:+"$FUSE_PID"} "${KIDS[@]}" 2>/dev/null
  if [ -n "$MNT" ]; then
    for n in 1 2 3; do
      [ -d "$MNT/gracewatch-demo-$$-node$n" ] && cgs+=("$MNT/gracewatch-demo-$$-node$n")
    done
  fi
  if [ ${#cgs[@]} -gt 0 ]; then
    # Only the processes of the demo's own cgroup subtrees.
    for f in $(find "${cgs[@]}" -name cgroup.kill); do echo 1 >"$f" 2>/dev/null; done
    within 10 emptied "${cgs[@]}"
    within 3 removed "${cgs[@]}"
    for f in "${cgs[@]}"; do [ -d "$f" ] && LEFT+=("cgroup $f"); done
  fi
  if [ -n "$T" ]; then
    fuse_minor
    if [ -n "$MINOR" ]; then
      # Aborted, the mount cannot block even a stat; if the abort failed,
      # a forced unmount aborts the connection too (FUSE's umount_begin).
      # No canonicalisation either way: umount never looks at the path.
      if [ "$aborted" = 0 ]; then umount -l -c "$T/fuse"; else umount -f -l -c "$T/fuse"; fi 2>/dev/null
      fuse_minor
      [ -n "$MINOR" ] && LEFT+=("mount $T/fuse")
    fi
    # Never rm -r into a mount: a FUSE mount that is still there would be
    # walked (and could hang it).
    if ! grep -q " $T/" /proc/self/mountinfo; then
      rm -rf "$T"
    fi
    [ -e "$T" ] && LEFT+=("folder $T")
  fi
  if [ ${#LEFT[@]} -gt 0 ]; then
    printf 'demo: could not remove: %s\n' "${LEFT[@]}" >&2
    [ "$rc" = 0 ] && rc=1
  else
    echo "demo: stopped and cleaned up"
  fi
  exit "$rc"
}

# A signal stops the demo normally: it cleans up and exits 0 (so that
# `make demo` stopped by Ctrl-C does not report an error). A signal that
# comes while a first one is being handled changes nothing.
on_signal() {
  if [ "$BASHPID" != "$$" ]; then
    # A subshell's copy of the trap: the main shell stops the demo (the
    # signal is passed on, in case it reached only this subshell).
    trap - EXIT
    kill -s "$1" "$$" 2>/dev/null
    exit 1
  fi
  [ -z "$STOPPING" ] || return 0
  STOPPING=$1
  cleanup
}
trap cleanup EXIT
for sig in INT TERM HUP QUIT PIPE; do
  # shellcheck disable=SC2064
  trap "on_signal $sig" "$sig"
done

if [ "$(id -u)" != 0 ]; then
  echo "demo: needs root (cgroups, and a FUSE mount for the hung epilogue)" >&2
  exit 1
fi
MNT=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
if [ -z "$MNT" ]; then
  echo "demo: no cgroup v2 mount in /proc/self/mountinfo" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "demo: needs python3" >&2; exit 1; }
# The interpreter itself, not a wrapper that finds it (pyenv's shims are
# shell scripts: three more processes for every request, which a signal
# could leave behind).
PY=$(python3 -c 'import sys; print(sys.executable)')
for b in aggregator nodeagent nodeagentd; do
  [ -x "$BIN/$b" ] || { echo "demo: no $BIN/$b: run make build (make demo does)" >&2; exit 1; }
done

fg go build -o "$BIN/hangfs-serve" ./internal/testutil/hangfs/hangfs-serve

T=$(mktemp -d "${TMPDIR:-/tmp}/gracewatch-demo.XXXXXX")
chmod 755 "$T"

free_port() {
  "$PY" -c 'import socket
s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

fg "$BIN/aggregator" keygen "$T/mesh.key" >/dev/null
# Node restriction, provisioned as a site does it: the aggregators' site
# key, each node's own key derived from it, and the aggregators' public keys
# on every node (packaging/README.md, "Node restriction").
fg "$BIN/aggregator" site-key "$T/site.key" >/dev/null
head -c 24 /dev/urandom | base64 >"$T/admin.token"
chmod 600 "$T/admin.token"
AGG_MESH=$(free_port)
AGG_HTTP=$(free_port)
URL=http://127.0.0.1:$AGG_HTTP

cat >"$T/aggregator.toml" <<EOF
name = "agg-1"
[mesh]
bind = "127.0.0.1:$AGG_MESH"
label = "gracewatch-demo"
keyring = "$T/mesh.key"
site_key_file = "$T/site.key"
[http]
listen = "127.0.0.1:$AGG_HTTP"
admin_token_file = "$T/admin.token"
[policy]
grace = "$GRACE"
clock_skew_allowance = "2s"
[[actuator]]
on = "down"
command = ["sh", "-c", "echo \"\$(date +%T) actuator: drain \$0: \$1\" >> $T/actuator.log", "{node}", "{reason}"]
[[actuator]]
on = "up"
command = ["sh", "-c", "echo \"\$(date +%T) actuator: resume \$0\" >> $T/actuator.log", "{node}"]
EOF

fg "$BIN/aggregator" public-key --config "$T/aggregator.toml" >"$T/aggregators.pub"

# get URL: the body of a GET into $T/get.out, or a failure (curl -fs,
# with python3). Run by fg in the demo's own shell, never in a pipeline or
# a command substitution: a subshell's client is one that cleanup does not
# know, and a signal could leave it behind.
get() {
  fg "$PY" -c 'import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except Exception:
    sys.exit(1)' "$1" >"$T/get.out"
}
# got: the first line of the last GET's body.
got() { GOT=; read -r GOT <"$T/get.out" || true; }

echo "== starting the aggregator ($URL) and three node agents (state in $T)"
"$BIN/aggregator" serve --config "$T/aggregator.toml" >"$T/aggregator.log" 2>&1 &
PIDS+=($!)
healthy() { get "$URL/healthz"; }
within 10 healthy || die "the aggregator did not answer on $URL/healthz within 10 s (see $T/aggregator.log)"

for n in 1 2 3; do
  mkdir -p "$T/node$n"
  fg "$BIN/aggregator" node-key "node$n" --out "$T/node$n/node.key" --config "$T/aggregator.toml" >/dev/null
  cat >"$T/node$n/nodeagent.toml" <<EOF
node_name = "node$n"
state_dir = "$T/node$n/state"
socket = "$T/node$n/agent.sock"
[cgroup]
root = "$MNT/gracewatch-demo-$$-node$n"
[teardown]
grace = "$GRACE"
kill_wait = "2s"
unkillable_after = "3s"
[api]
stop_wait = "2s"
[diagnostics]
sample_interval = "1s"
[mesh]
enabled = true
bind = "127.0.0.1:$(free_port)"
join = ["127.0.0.1:$AGG_MESH"]
label = "gracewatch-demo"
keyring = "$T/mesh.key"
node_key_file = "$T/node$n/node.key"
aggregator_keys_file = "$T/aggregators.pub"
EOF
  "$BIN/nodeagent" serve --config "$T/node$n/nodeagent.toml" >"$T/node$n/agent.log" 2>&1 &
  PIDS+=($!)
done
na() { local n=$1; shift; GRACEWATCH_SOCKET=$T/node$n/agent.sock fg "$BIN/nodeagent" "$@"; }
answers() { na "$1" status >/dev/null 2>&1; }
for n in 1 2 3; do
  within 10 answers $n || die "agent node$n did not answer within 10 s (see $T/node$n/agent.log)"
done
all_up() { get "$URL/v1/nodes?format=hostlist&state=up" && got && [ "$GOT" = "node[1-3]" ]; }
within 20 all_up || die "the aggregator did not see node[1-3] up within 20 s"

# The scheduler's view, as it changes (one python3 process reads the
# event stream: no pipeline whose first half could outlive the demo).
"$PY" -u -c '
import json, signal, sys, datetime, urllib.request
signal.signal(signal.SIGINT, signal.SIG_DFL)
last = {}
stream = urllib.request.urlopen(sys.argv[1])
open(sys.argv[2], "w").close()  # subscribed: the demo may go on
for raw in stream:
    line = raw.decode()
    if not line.startswith("data:"): continue
    d = json.loads(line[5:])
    nodes = d.get("nodes") or [d]
    for n in nodes:
        if "name" not in n: continue
        key = (n["state"], n.get("free_at"), n.get("reason"))
        if last.get(n["name"]) == key: continue
        last[n["name"]] = key
        extra = ""
        if n.get("free_at"): extra = " free_at=" + n["free_at"][11:19]
        if n.get("reason"): extra += "  reason: " + n["reason"]
        print("%s  scheduler sees %-6s %-11s%s" % (datetime.datetime.now().strftime("%H:%M:%S"), n["name"], n["state"], extra), flush=True)
' "$URL/v1/watch" "$T/watching" &
PIDS+=($!)
within 10 test -e "$T/watching" || die "the scheduler's view did not subscribe within 10 s"

HUNG_CMD=(sh -c "trap '' TERM; echo 'hung epilogue: ignoring SIGTERM'; exec sleep 3600")
if [ -c /dev/fuse ]; then
  mkdir "$T/fuse"
  "$BIN/hangfs-serve" "$T/fuse" >"$T/fuse.log" 2>&1 &
  FUSE_PID=$!
  # Ready once it says so (hangfs.ReadyLine): its own look at the mount
  # while mounting is over, and only the hung reader will wait on it.
  within 10 grep -qx ready "$T/fuse.log" || die "the FUSE server did not get ready within 10 s (see $T/fuse.log)"
  HUNG_CMD=(sh -c "echo 'hung epilogue: reading a file on a dead file system'; cat $T/fuse/hang")
fi

E=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
echo "== jobs 1001 (node1), 1002 (node2), 1003 (node3) end now; grace $GRACE"
na 1 job start --job 1001 --expiration "$E" >/dev/null
na 2 job start --job 1002 --expiration "$E" >/dev/null
na 3 job start --job 1003 --expiration "$E" >/dev/null
# The wrappers run in the background, started directly (not through na's
# fg), so that their pids are theirs and cleanup can stop them.
sock() { echo "$T/node$1/agent.sock"; }
GRACEWATCH_SOCKET=$(sock 1) "$BIN/nodeagent" epilog --job 1001 -- sh -c 'echo "epilogue 1001 (node1): cleaned up"' &
PIDS+=($!)
GRACEWATCH_SOCKET=$(sock 2) "$BIN/nodeagent" epilog --job 1002 -- sh -c 'sleep 3; echo "epilogue 1002 (node2): done after 3s"' &
PIDS+=($!)
GRACEWATCH_SOCKET=$(sock 3) "$BIN/nodeagent" epilog --job 1003 -- "${HUNG_CMD[@]}" >"$T/epilog-1003.out" 2>&1 &
PIDS+=($!)

diagnosed() { get "$URL/v1/nodes/node3" && grep -qE 'unkillable|killed by SIGKILL' "$T/get.out"; }
within 60 diagnosed || echo "demo: node3 not diagnosed within 60 s" >&2
sleep 0.5
echo
echo "== aggregator nodes (the scheduler's list)"
fg "$BIN/aggregator" nodes --url "$URL" || true
echo
GOT=
get "$URL/v1/nodes?state=down&format=hostlist" && got
echo "== down nodes as a hostlist: $GOT"
echo
echo "== nodeagent diagnose on node3"
# Into a file, not a pipe: a subshell's fg would start a client that
# cleanup does not know.
na 3 diagnose >"$T/diagnose.txt" 2>&1 || true
head -25 "$T/diagnose.txt"
echo
[ -f "$T/actuator.log" ] && { echo "== actuator runs"; cat "$T/actuator.log"; echo; }

if [ "$HOLD" = 1 ]; then
  cat <<EOF
The cluster keeps running. Explore it:
  curl -s $URL/v1/nodes | python3 -m json.tool
  curl -sN $URL/v1/watch
  $BIN/aggregator nodes --url $URL --state down
  GRACEWATCH_SOCKET=$T/node3/agent.sock $BIN/nodeagent diagnose
  $BIN/aggregator resume node3 --reason "FUSE server restarted" --url $URL --token-file $T/admin.token
  ls $T/node3/state/reports/ ; less $T/node3/agent.log $T/aggregator.log
Press Ctrl-C to stop and remove everything.
EOF
  wait "${PIDS[0]}"
fi
