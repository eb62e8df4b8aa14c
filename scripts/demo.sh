#!/usr/bin/env bash
# gracewatch demo: a node agent on a temporary cgroup subtree, three jobs with
# three epilogues — one normal, one slow but within grace, one truly hung —
# and the node's state as the scheduler would see it, until the hung one has
# turned the node DOWN with its diagnosis.
#
# Needs root and cgroup v2. With /dev/fuse the hung epilogue reads a FUSE file
# whose reads never answer (a process SIGKILL cannot end); without it, a
# process that ignores SIGTERM. Everything it makes is removed on exit.
#
# DEMO_HOLD=1 (the default on a terminal) keeps the agent running for you to
# explore until Ctrl-C; DEMO_HOLD=0 stops after the diagnosis.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
HOLD=${DEMO_HOLD:-$([ -t 0 ] && echo 1 || echo 0)}

if [ "$(id -u)" != 0 ]; then
  echo "demo: needs root (cgroups, and a FUSE mount for the hung epilogue)" >&2
  exit 1
fi
MNT=$(awk '$0 ~ / - cgroup2 / {print $5; exit}' /proc/self/mountinfo)
if [ -z "$MNT" ]; then
  echo "demo: no cgroup v2 mount in /proc/self/mountinfo" >&2
  exit 1
fi

go build -o "$BIN/hangfs-serve" ./internal/testutil/hangfs/hangfs-serve

T=$(mktemp -d /tmp/gracewatch-demo.XXXXXX)
CG=$MNT/gracewatch-demo-$$
SOCK=$T/agent.sock
AGENT_PID= FUSE_PID=

cleanup() {
  set +e
  [ -n "$AGENT_PID" ] && kill "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null
  [ -n "$FUSE_PID" ] && kill -9 "$FUSE_PID" 2>/dev/null && wait "$FUSE_PID" 2>/dev/null
  if [ -d "$CG" ]; then
    # Only the processes in the demo's own cgroup subtree, by pid.
    for f in $(find "$CG" -name cgroup.kill); do echo 1 >"$f" 2>/dev/null; done
    sleep 0.5
    find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
  fi
  [ -d "$T/fuse" ] && umount -l "$T/fuse" 2>/dev/null
  rm -rf "$T"
  echo "demo: cleaned up"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$T/nodeagent.toml" <<EOF
node_name = "demo-node"
state_dir = "$T/state"
socket = "$SOCK"

[cgroup]
root = "$CG"

[teardown]
grace = "6s"
kill_wait = "2s"
unkillable_after = "3s"
auto_resume = "never"

[diagnostics]
sample_interval = "1s"
EOF

echo "== starting nodeagent (config $T/nodeagent.toml, cgroup root $CG)"
"$BIN/nodeagent" serve --config "$T/nodeagent.toml" >"$T/agent.log" 2>&1 &
AGENT_PID=$!
export GRACEWATCH_SOCKET=$SOCK
for _ in $(seq 100); do "$BIN/nodeagent" status >/dev/null 2>&1 && break; sleep 0.1; done

HUNG_CMD=(sh -c "trap '' TERM; echo 'hung epilogue: ignoring SIGTERM'; exec sleep 3600")
if [ -c /dev/fuse ]; then
  mkdir "$T/fuse"
  "$BIN/hangfs-serve" "$T/fuse" >"$T/fuse.log" 2>&1 &
  FUSE_PID=$!
  for _ in $(seq 100); do mountpoint -q "$T/fuse" && break; sleep 0.1; done
  HUNG_CMD=(sh -c "echo 'hung epilogue: reading a file on a dead file system'; cat $T/fuse/hang")
fi

E=$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)
for j in 1001 1002 1003; do "$BIN/nodeagent" job start --job $j --expiration "$E"; done

echo "== epilogues: 1001 normal, 1002 slow but within the 6s grace, 1003 hung"
"$BIN/nodeagent" epilog --job 1001 -- sh -c 'echo "epilogue 1001: cleaned up"' &
"$BIN/nodeagent" epilog --job 1002 -- sh -c 'sleep 4; echo "epilogue 1002: done after 4s"' &
"$BIN/nodeagent" epilog --job 1003 -- "${HUNG_CMD[@]}" >"$T/epilog-1003.out" 2>&1 &

echo "== the node as the scheduler sees it"
last=
for _ in $(seq 300); do
  line=$("$BIN/nodeagent" status --json | python3 -c '
import json,sys
s=json.load(sys.stdin)
jobs=" ".join("%s:%s" % (j["id"], j["phase"]) for j in s["jobs"])
print("state=%s free_at=%s jobs=[%s]%s" % (s["state"], s["free_at"], jobs, ("  reason: " + s["reason"]) if s["reason"] else ""))' 2>/dev/null || true)
  if [ "$line" != "$last" ]; then
    printf '%s  %s\n' "$(date +%H:%M:%S)" "$line"
    last=$line
  fi
  case "$line" in *hung*|*unkillable*|*killed*) break ;; esac
  sleep 0.2
done

echo
echo "== nodeagent status"
"$BIN/nodeagent" status
echo
echo "== nodeagent diagnose"
"$BIN/nodeagent" diagnose | head -40

if [ "$HOLD" = 1 ]; then
  cat <<EOF

The agent keeps running. Explore it:
  export GRACEWATCH_SOCKET=$SOCK
  $BIN/nodeagent status --json
  $BIN/nodeagent diagnose --json
  $BIN/nodeagent resume --reason "demo over"
  ls $T/state/reports/ ; cat $T/agent.log
Press Ctrl-C to stop and remove everything.
EOF
  wait "$AGENT_PID"
fi
