#!/bin/sh
# [teardown] expiration_command for Slurm: prints the job's current
# expiration (its EndTime as Unix seconds, or 0 without a time limit), so
# that the node agent does not latch a node DOWN for a job whose time limit
# was extended (scontrol update JobId=N TimeLimit=...) after it was
# registered. The agent runs it only for a job still running at its
# deadline E + G with no end reported, once per expiration: rarely, and
# then one scontrol call per node of the job.
#
# Install on every compute node:
#   install -m 0755 slurm-expiration.sh /etc/gracewatch/slurm-expiration.sh
# and in /etc/gracewatch/nodeagent.toml, [teardown]:
#   expiration_command = ["/etc/gracewatch/slurm-expiration.sh", "{job}"]
#
# It exits non-zero (the agent keeps the deadline) when Slurm does not know
# the job or does not answer.
set -eu
job=${1:?usage: $0 JOBID}
info=$(scontrol show job -o "$job")
field() { printf '%s\n' "$info" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }
case $(field TimeLimit) in
UNLIMITED | Partition_Limit) echo 0 ;;
*) date -d "$(field EndTime)" +%s ;;
esac
