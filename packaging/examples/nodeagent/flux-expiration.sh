#!/bin/sh
# [teardown] expiration_command for Flux: prints the job's current
# expiration, R's execution.expiration with its resource-update events
# applied (what the exec system ends the job at), as Unix seconds, or 0
# without a time limit (sched-simple's 0.0, Fluxion's 9223372036). The node agent runs it only for a job still running
# at its deadline E + G with no end reported, or whose teardown is at its
# deadline although the job ended after E, once per expiration: rarely.
#
# It keeps a node from being drained when the job's time limit moved in
# Flux alone (flux update ID duration=... of a running job, by the
# instance owner), and when the gracewatch jobtap plugin was removed after
# the job was planned with G: the exec system then ends the job at E + G,
# not at the user's E that the prolog registered, and the teardown would
# otherwise have no grace at all.
#
# Install on every compute node:
#   install -m 0755 flux-expiration.sh /etc/gracewatch/flux-expiration.sh
# and in /etc/gracewatch/nodeagent.toml, [teardown]:
#   expiration_command = ["/etc/gracewatch/flux-expiration.sh", "{job}"]
#
# It exits non-zero (the agent keeps the deadline) when Flux does not know
# the job or does not answer.
set -eu
job=${1:?usage: $0 JOBID}
e=$(flux jobs -n -o '{expiration}' "$job")
case $e in
'' | *[!0-9.]*)
	echo "flux-expiration: job $job: flux jobs printed expiration '$e'" >&2
	exit 1
	;;
9223372036 | 9223372036.*)
	# Fluxion's expiration of a job without a time limit.
	echo 0
	;;
*) echo "$e" ;;
esac
