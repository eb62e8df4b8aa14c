#!/usr/bin/env bash
# gracewatch demo: a local cluster on loopback — one aggregator and three node
# agents, each with its own state dir, socket and cgroup root, joined in an
# encrypted memberlist mesh. Three jobs end at once: node1's epilogue is
# normal, node2's slow but within grace, node3's truly hung. The scheduler's
# view is printed from the aggregator's /v1/watch as it changes, until node3
# is DOWN with its diagnosis.
#
# Needs root and cgroup v2. With /dev/fuse the hung epilogue reads a FUSE file
# whose reads never answer (a process SIGKILL cannot end); without it, a
# process that ignores SIGTERM. Everything it makes is removed on exit.
#
# DEMO_HOLD=1 (the default on a terminal) keeps the cluster running for you to
# explore until Ctrl-C; DEMO_HOLD=0 stops after the diagnosis.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
HOLD=${DEMO_HOLD:-$([ -t 0 ] && echo 1 || echo 0)}
GRACE=${DEMO_GRACE:-6s}

if [ "$(id -u)" != 0 ]; then
  echo "demo: needs root (cgroups, and a FUSE mount for the hung epilogue)" >&2
  exit 1
fi
MNT=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
if [ -z "$MNT" ]; then
  echo "demo: no cgroup v2 mount in /proc/self/mountinfo" >&2
  exit 1
fi
for c in curl python3; do
  command -v $c >/dev/null || { echo "demo: needs $c" >&2; exit 1; }
done

go build -o "$BIN/hangfs-serve" ./internal/testutil/hangfs/hangfs-serve

T=$(mktemp -d /tmp/gracewatch-demo.XXXXXX)
chmod 755 "$T"
PIDS=()
FUSE_PID=

cleanup() {
  set +e
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "$FUSE_PID" ] && kill -9 "$FUSE_PID" 2>/dev/null && wait "$FUSE_PID" 2>/dev/null
  for n in 1 2 3; do
    CG=$MNT/gracewatch-demo-$$-node$n
    [ -d "$CG" ] || continue
    # Only the processes of the demo's own cgroup subtrees.
    for f in $(find "$CG" -name cgroup.kill); do echo 1 >"$f" 2>/dev/null; done
    sleep 0.3
    find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  # A dead FUSE mount fails even a stat ([ -d ]): unmount unconditionally.
  umount -l "$T/fuse" 2>/dev/null
  rm -rf "$T"
  echo "demo: stopped and cleaned up"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket
s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

"$BIN/aggregator" keygen "$T/mesh.key" >/dev/null
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

echo "== starting the aggregator ($URL) and three node agents (state in $T)"
"$BIN/aggregator" serve --config "$T/aggregator.toml" >"$T/aggregator.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do curl -fs "$URL/healthz" >/dev/null && break; sleep 0.1; done

for n in 1 2 3; do
  mkdir -p "$T/node$n"
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
EOF
  "$BIN/nodeagent" serve --config "$T/node$n/nodeagent.toml" >"$T/node$n/agent.log" 2>&1 &
  PIDS+=($!)
done
na() { local n=$1; shift; GRACEWATCH_SOCKET=$T/node$n/agent.sock "$BIN/nodeagent" "$@"; }
for n in 1 2 3; do
  for _ in $(seq 100); do na $n status >/dev/null 2>&1 && break; sleep 0.1; done
done
for _ in $(seq 100); do
  [ "$(curl -fs "$URL/v1/nodes?format=hostlist&state=up" 2>/dev/null)" = "node[1-3]" ] && break
  sleep 0.1
done

# The scheduler's view, as it changes.
curl -sN "$URL/v1/watch" | python3 -u -c '
import json, sys, datetime
last = {}
for line in sys.stdin:
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
' &
WATCH_PID=$!
PIDS+=($WATCH_PID)
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
na 1 epilog --job 1001 -- sh -c 'echo "epilogue 1001 (node1): cleaned up"' &
na 2 epilog --job 1002 -- sh -c 'sleep 3; echo "epilogue 1002 (node2): done after 3s"' &
na 3 epilog --job 1003 -- "${HUNG_CMD[@]}" >"$T/epilog-1003.out" 2>&1 &

for _ in $(seq 300); do
  curl -fs "$URL/v1/nodes/node3" 2>/dev/null | grep -qE 'unkillable|killed by SIGKILL' && break
  sleep 0.2
done
sleep 0.5
echo
echo "== aggregator nodes (the scheduler's list)"
"$BIN/aggregator" nodes --url "$URL" || true
echo
echo "== down nodes as a hostlist: $(curl -fs "$URL/v1/nodes?state=down&format=hostlist")"
echo
echo "== nodeagent diagnose on node3"
na 3 diagnose | head -25
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
