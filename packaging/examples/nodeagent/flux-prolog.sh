#!/bin/sh
# Flux job-manager prolog for gracewatch: registers the job with the node
# agent at its start, with its expiration E taken from the job's R
# (execution.expiration), so that the deadline D = min(T_end, E) + G uses the
# real E. See flux-housekeeping.toml beside this file for the configuration.
#
# Install on every compute node:
#   install -m 0755 flux-prolog.sh /etc/flux/system/gracewatch-prolog
#
# It never fails the job: if the agent or the broker cannot be reached it
# says so and exits 0, and the job is registered by its housekeeping instead
# (with E = the time housekeeping starts).
: "${FLUX_JOB_ID:?not run by Flux: FLUX_JOB_ID is not set}"
if ! flux job info "$FLUX_JOB_ID" R |
	/usr/sbin/nodeagent job start --job "$FLUX_JOB_ID" --R /dev/stdin >/dev/null; then
	echo "gracewatch: job $FLUX_JOB_ID not registered with the node agent (registered at housekeeping instead)" >&2
fi
exit 0
