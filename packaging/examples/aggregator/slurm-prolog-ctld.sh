#!/bin/sh
# Slurm PrologSlurmctld for gracewatch: registers each job, with its
# expiration E, with the node agents of all its nodes, through the
# aggregator and the mesh. It runs once per job, on the controller, before
# the job starts: one request to slurmctld per job, not one per node.
# Slurm 22.05 gives the node Prolog no end time or time limit, and warns
# against calling scontrol or squeue from every node's prolog at scale.
#
# Install on the Slurm controller (the host running slurmctld), beside the
# aggregator's client (the gracewatch-aggregator package):
#   install -m 0755 slurm-prolog-ctld.sh /etc/slurm/gracewatch-prolog-ctld.sh
# and in slurm.conf:
#   PrologSlurmctld=/etc/slurm/gracewatch-prolog-ctld.sh
# (several PrologSlurmctld scripts: give a comma-separated list, or run this
# one from the site's own). slurmctld runs it as SlurmUser: that user must
# read the aggregator's admin token, and reach the aggregator's URL:
#   GRACEWATCH_AGGREGATOR=https://agg1.example:9471 (default
#   http://127.0.0.1:9471), GRACEWATCH_TOKEN_FILE (default
#   /etc/gracewatch/admin.token).
# Set them in slurmctld's environment or edit them below.
#
# On each node the agent then enforces the deadline E + G from the job's
# start, whether or not an end is ever reported (a task stuck in D at its
# time limit keeps Slurm from ever running the Epilog). The node's own
# Prolog (slurm-prolog.sh, gracewatch-nodeagent's examples) adds the job's
# cgroup, where the agent sees the job's tasks.
#
# It never fails the job: slurmctld requeues or holds a job whose
# PrologSlurmctld fails. Whatever goes wrong is said on standard error
# (slurmctld's log) and the script exits 0; the job's deadline then runs
# from its epilogue only (D = T_end + G), as without this script.
: "${SLURM_JOB_ID:?not run by slurmctld: SLURM_JOB_ID is not set}"
AGGREGATOR_CLI=/usr/sbin/aggregator
export GRACEWATCH_AGGREGATOR="${GRACEWATCH_AGGREGATOR:-http://127.0.0.1:9471}"
TOKEN_FILE="${GRACEWATCH_TOKEN_FILE:-/etc/gracewatch/admin.token}"

say() { echo "gracewatch: job $SLURM_JOB_ID: $*" >&2; }

# The one request to the controller: the job's record, on one line.
if ! info=$(scontrol show job -o "$SLURM_JOB_ID" 2>&1); then
	say "scontrol show job failed ($info); not registered"
	exit 0
fi
field() { printf '%s\n' "$info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }
limit=$(field TimeLimit)
nodes=${SLURM_JOB_NODELIST:-$(field NodeList)}
case $limit in
UNLIMITED | Partition_Limit | "")
	exp=0 # no time limit: no deadline until the job ends
	;;
*)
	# EndTime is the controller's local time, without a zone.
	end=$(field EndTime)
	if ! exp=$(date -d "$end" +%s 2>/dev/null); then
		say "EndTime \"$end\" is not a time; not registered"
		exit 0
	fi
	;;
esac
if [ -z "$nodes" ] || [ "$nodes" = "(null)" ]; then
	say "no nodes allocated yet; not registered"
	exit 0
fi
if ! out=$("$AGGREGATOR_CLI" job start --job "$SLURM_JOB_ID" --nodes "$nodes" --expiration "$exp" --token-file "$TOKEN_FILE" 2>&1); then
	say "not registered on every node: $out"
fi
exit 0
