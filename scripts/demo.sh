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
# behind. e2e/demo_test.go checks it.
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

# ours PID: whether PID is still a child of this shell (a pid that ended
# may have been reused by another process, which must not be signalled).
ours() {
  [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2)" = "$$" ]
}

# alive PID...: whether one of the pids is still running (not gone, not a
# zombie waiting to be reaped).
alive() {
  local p st
  for p in "$@"; do
    st=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1) || continue
    [ -n "$st" ] && [ "$st" != Z ] && return 0
  done
  return 1
}

# stop_all SIG SECONDS PID...: signal the pids, wait up to SECONDS for them,
# then SIGKILL what is left, and reap them.
stop_all() {
  local sig=$1 secs=$2 p i
  shift 2
  [ $# -gt 0 ] || return 0
  for p in "$@"; do ours "$p" && kill "-$sig" "$p" 2>/dev/null; done
  for ((i = 0; i < secs * 10; i++)); do alive "$@" || break; sleep 0.1; done
  for p in "$@"; do ours "$p" && kill -KILL "$p" 2>/dev/null; done
  for p in "$@"; do wait "$p" 2>/dev/null; done
  return 0
}

# cleanup runs once, at any exit: the end of the demo, an error, or a
# signal. Further signals are ignored until it is done, so a second Ctrl-C
# (or a SIGTERM after a SIGINT) cannot cut it short.
cleanup() {
  local rc=$? n cg f i left=()
  trap '' INT TERM HUP QUIT PIPE
  set +e
  exec 1>&8 2>&9
  # The agents wait [api] stop_wait (2 s here) for the epilog streams.
  # (bash's notes of children that a signal ended go to /dev/null.)
  stop_all TERM 10 ${FG:+"$FG"} "${PIDS[@]}" 2>/dev/null
  # Ending the FUSE server releases the unkillable reader.
  [ -n "$FUSE_PID" ] && stop_all KILL 5 "$FUSE_PID" 2>/dev/null
  if [ -n "$MNT" ]; then
    for n in 1 2 3; do
      cg=$MNT/gracewatch-demo-$$-node$n
      [ -d "$cg" ] || continue
      # Only the processes of the demo's own cgroup subtrees.
      for f in $(find "$cg" -name cgroup.kill); do echo 1 >"$f" 2>/dev/null; done
      for ((i = 0; i < 100; i++)); do
        grep -q '^populated 0' "$cg/cgroup.events" 2>/dev/null && break
        sleep 0.1
      done
      for ((i = 0; i < 20; i++)); do
        find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
        [ -d "$cg" ] || break
        sleep 0.1
      done
      [ -d "$cg" ] && left+=("cgroup $cg")
    done
  fi
  if [ -n "$T" ]; then
    # A dead FUSE mount fails even a stat ([ -d ]): unmount unconditionally.
    umount -l "$T/fuse" 2>/dev/null
    grep -q " $T/fuse " /proc/self/mountinfo && left+=("mount $T/fuse")
    rm -rf "$T"
    [ -e "$T" ] && left+=("folder $T")
  fi
  if [ ${#left[@]} -gt 0 ]; then
    echo "demo: could not remove: ${left[*]}" >&2
    [ "$rc" = 0 ] && rc=1
  else
    echo "demo: stopped and cleaned up"
  fi
  exit "$rc"
}

# A signal stops the demo normally: it cleans up and exits 0 (so that
# `make demo` stopped by Ctrl-C does not report an error).
on_signal() {
  trap '' INT TERM HUP QUIT PIPE
  set +e
  exec 1>&8 2>&9
  echo
  echo "demo: stopping (SIG$1)"
  exit 0
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
for b in aggregator nodeagent nodeagentd; do
  [ -x "$BIN/$b" ] || { echo "demo: no $BIN/$b: run make build (make demo does)" >&2; exit 1; }
done

fg go build -o "$BIN/hangfs-serve" ./internal/testutil/hangfs/hangfs-serve

T=$(mktemp -d /tmp/gracewatch-demo.XXXXXX)
chmod 755 "$T"

free_port() {
  python3 -c 'import socket
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

# get URL: the body of a GET, or a failure (curl -fs, with python3).
get() {
  python3 -c 'import sys, urllib.request
try:
    sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except Exception:
    sys.exit(1)' "$1"
}

echo "== starting the aggregator ($URL) and three node agents (state in $T)"
"$BIN/aggregator" serve --config "$T/aggregator.toml" >"$T/aggregator.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do get "$URL/healthz" >/dev/null && break; sleep 0.1; done

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
for n in 1 2 3; do
  for _ in $(seq 100); do na $n status >/dev/null 2>&1 && break; sleep 0.1; done
done
for _ in $(seq 100); do
  [ "$(get "$URL/v1/nodes?format=hostlist&state=up")" = "node[1-3]" ] && break
  sleep 0.1
done

# The scheduler's view, as it changes (one python3 process reads the
# event stream: no pipeline whose first half could outlive the demo).
python3 -u -c '
import json, signal, sys, datetime, urllib.request
signal.signal(signal.SIGINT, signal.SIG_DFL)
last = {}
for raw in urllib.request.urlopen(sys.argv[1]):
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
' "$URL/v1/watch" &
PIDS+=($!)
sleep 0.5

HUNG_CMD=(sh -c "trap '' TERM; echo 'hung epilogue: ignoring SIGTERM'; exec sleep 3600")
if [ -c /dev/fuse ]; then
  mkdir "$T/fuse"
  "$BIN/hangfs-serve" "$T/fuse" >"$T/fuse.log" 2>&1 &
  FUSE_PID=$!
  for _ in $(seq 100); do grep -q " $T/fuse " /proc/self/mountinfo && break; sleep 0.1; done
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

for _ in $(seq 300); do
  get "$URL/v1/nodes/node3" | grep -qE 'unkillable|killed by SIGKILL' && break
  sleep 0.2
done
sleep 0.5
echo
echo "== aggregator nodes (the scheduler's list)"
fg "$BIN/aggregator" nodes --url "$URL" || true
echo
echo "== down nodes as a hostlist: $(get "$URL/v1/nodes?state=down&format=hostlist")"
echo
echo "== nodeagent diagnose on node3"
{ na 3 diagnose || true; } | head -25
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
