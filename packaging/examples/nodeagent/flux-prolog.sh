#!/bin/sh
# Flux job-manager prolog for gracewatch: registers the job with the node
# agent at its start, with its expiration E taken from the job's R
# (execution.expiration), so that the deadline D = min(T_end, E) + G uses the
# real E. See flux-housekeeping.toml beside this file for the configuration.
#
# Install on every compute node:
#   install -m 0755 flux-prolog.sh /etc/flux/system/gracewatch-prolog
# and run it on every node of the job ([job-manager.prolog] per-rank = true).
#
# Flux gives the job-manager prolog the job id in f58 form (FLUX_JOB_ID=ƒDUUxXH)
# and housekeeping the decimal one (FLUX_JOB_ID=2342191800320): the job is
# registered under the decimal id (`flux job id --to=dec`), which
# flux-epilog.sh uses too, so that both name one job on the agent.
#
# With the gracewatch jobtap plugin (gracewatch.so, packaging/README.md)
# the scheduler's R carries E + G, and the plugin's jobspec-update event
# the user's own limit (attributes.system.gracewatch): the job's eventlog
# goes with R (--eventlog), so that the agent takes the user's E,
# min(starttime + T, R's expiration), and says on standard error (Flux's
# log) when the plugin's G is not the agent's. Without the plugin no
# event carries such a record (one the user wrote into the jobspec they
# submitted is not taken) and R's expiration is E.
#
# R's expiration is 0.0 (sched-simple) or 9223372036 (Fluxion) for a job
# without a time limit: the job is then registered without an expiration, and
# its deadline is the end of its tasks (the start of housekeeping) plus G.
#
# The job's owner goes with the registration (the agent's reports, its logs
# and the cluster's teardown history name it): the job-manager prolog and
# housekeeping get its uid in FLUX_JOB_USERID (flux-core's perilog and
# housekeeping set it), resolved to a name with getent, else the uid
# itself. A name the agent does not accept is dropped with a warning,
# never the job.
#
# It never fails the job (a failing prolog would drain the node): if the
# agent or the broker cannot be reached it says so and exits 0, and the job
# is registered by its housekeeping instead (with E = the time housekeeping
# starts). It waits at most 10 s for an agent that is not running.
: "${FLUX_JOB_ID:?not run by Flux: FLUX_JOB_ID is not set}"
if ! id=$(flux job id --to=dec "$FLUX_JOB_ID"); then
	echo "gracewatch: job $FLUX_JOB_ID: not a Flux job id; not registered with the node agent" >&2
	exit 0
fi
user=
if [ -n "${FLUX_JOB_USERID:-}" ]; then
	user=$(getent passwd "$FLUX_JOB_USERID" | cut -d: -f1) || true
	user=${user:-$FLUX_JOB_USERID}
fi
eventlog=$(mktemp) || eventlog=
trap 'rm -f "$eventlog"' EXIT
if [ -n "$eventlog" ] && ! flux job info "$FLUX_JOB_ID" eventlog >"$eventlog"; then
	rm -f "$eventlog"
	eventlog=
fi
if ! flux job info "$FLUX_JOB_ID" R |
	/usr/sbin/nodeagent job start --connect-wait 10s --job "$id" --R /dev/stdin ${eventlog:+--eventlog "$eventlog"} ${user:+--user "$user"} >/dev/null; then
	echo "gracewatch: job $id not registered with the node agent (registered at housekeeping instead)" >&2
fi
exit 0
