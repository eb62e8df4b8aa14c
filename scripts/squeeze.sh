#!/usr/bin/env bash
# Runs a command squeezed onto one busy CPU: the command and a busy loop
# share CPU 0 (taskset), so every process the command starts (test binaries,
# agents, aggregators, slurmd, Flux brokers) gets about half of one core.
# A test that assumes a speed fails here; a test that waits for its event
# passes idle and squeezed alike (README.md, "Tests at any speed").
#
#   scripts/squeeze.sh make test
#   SQUEEZE_CPU=1 SQUEEZE_HOGS=2 scripts/squeeze.sh go test ./agent/...
#
# The busy loops are ended by their pid when the command ends, however it
# ends. The command's exit status is this script's.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: $0 command [args...]" >&2
  exit 2
fi
cpu=${SQUEEZE_CPU:-0}
hogs=${SQUEEZE_HOGS:-1}
command -v taskset >/dev/null || { echo "squeeze: taskset (util-linux) is needed" >&2; exit 1; }
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in $(seq "$hogs"); do
  taskset -c "$cpu" bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "squeeze: on CPU $cpu beside $hogs busy loop(s): $1 ..." >&2
status=0
taskset -c "$cpu" "$@" || status=$?
exit "$status"
