#!/bin/sh
# Slurm Epilog= wrapper for gracewatch: the site's real epilogue runs under
# the node agent's supervision.
#
# Install on every compute node:
#   install -m 0755 slurm-epilog.sh /etc/slurm/epilog.sh
#   mv <the current epilogue> /etc/slurm/epilog.real   (it stays as it was)
# and in slurm.conf, then `scontrol reconfigure`:
#   Epilog=/etc/slurm/epilog.sh
#
# slurmd runs Epilog as root on each node of a job when the job ends, with
# SLURM_JOB_ID and the rest of its environment. `nodeagent epilog` has the
# agent start epilog.real in the job's own cgroup (as the caller, root, in the
# caller's directory and environment), streams its output back here and exits
# with its status (128+N if signal N killed it). A job the agent does not know
# yet is registered now, with E = now: its teardown deadline is
# D = now + G, G being [teardown] grace of /etc/gracewatch/nodeagent.toml
# (120s by default).
#
# The grace and PrologEpilogTimeout:
# - At D, an epilogue still running (or any process left in its cgroup) makes
#   the agent latch the node DOWN with a diagnosis (`nodeagent status`,
#   `nodeagent diagnose`), then SIGTERM, kill_wait later SIGKILL, and
#   unkillable_after later classify what survived. With the mesh and an
#   aggregator running the Slurm actuator (actuator-slurm.toml), the node is
#   drained with Reason="gracewatch: <why>".
# - PrologEpilogTimeout: leave it unset, or set it well above
#   G + kill_wait + unkillable_after (120 + 10 + 30 = 160 s by default; e.g.
#   PrologEpilogTimeout=300). When it expires, slurmd kills this wrapper and
#   drains the node as "Epilog error", which says nothing of what is hung;
#   gracewatch must get there first. Killing the wrapper does not stop the
#   epilogue: the agent keeps supervising it and still enforces D.
# - To make the wrapper return before that timeout while the agent goes on,
#   add `--timeout 200s` (shorter than PrologEpilogTimeout) before `--`: the
#   wrapper then exits 124, a failed epilogue for slurmd.
# - The scheduler plans the next job at this job's end time; the agent's G is
#   the slack within which a teardown does not count against the node.
set -eu
: "${SLURM_JOB_ID:?not run by slurmd: SLURM_JOB_ID is not set}"

# Optional: without the agent (not installed, or stopped), run the real
# epilogue unsupervised instead of failing it, so jobs still get cleaned up.
# [ -S /run/gracewatch/agent.sock ] || exec /etc/slurm/epilog.real

# The job's user, for a job the Prolog did not register (see slurm-prolog.sh).
user=${SLURM_JOB_USER:-}
if [ -z "$user" ] && [ -n "${SLURM_JOB_UID:-}" ]; then
	user=$(getent passwd "$SLURM_JOB_UID" | cut -d: -f1) || true
	user=${user:-$SLURM_JOB_UID}
fi
exec /usr/sbin/nodeagent epilog --job "$SLURM_JOB_ID" ${user:+--user "$user"} -- /etc/slurm/epilog.real
