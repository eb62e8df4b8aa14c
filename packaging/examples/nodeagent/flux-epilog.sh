#!/bin/sh
# Flux housekeeping (or job-manager epilog) wrapper for gracewatch: the
# site's real housekeeping runs under the node agent's supervision. See
# flux-housekeeping.toml beside this file for the Flux configuration.
#
# Install on every compute node:
#   install -m 0755 flux-epilog.sh /etc/flux/system/gracewatch-housekeeping
# and put the real work (for example flux-core's
# `flux-run-system-scripts housekeeping`, which runs
# /etc/flux/system/housekeeping.d/*) in /etc/flux/system/housekeeping.real.
# Wrap the scripts themselves, not a command that starts them as a systemd
# unit (flux-housekeeping@.service): those would run in that unit's cgroup,
# outside the agent's supervision.
#
# Flux runs housekeeping after each job, on each of its nodes, with no
# arguments, as the instance owner (root through the IMP, which must pass
# FLUX_* in [run.housekeeping] allowed-environment), with FLUX_JOB_ID
# (decimal), FLUX_JOB_RANKS, FLUX_JOB_USERID and FLUX_URI (this node's
# broker) set. Without the IMP the instance owner ("flux") must be in
# [api] allowed_uids of /etc/gracewatch/nodeagent.toml. The job-manager
# epilog gets FLUX_JOB_ID in f58 form (ƒDUUxXH): it is converted to the
# decimal id under which flux-prolog.sh registered the job.
#
# The deadline is D = min(T_end, E) + G: E from flux-prolog.sh if the job was
# registered at its start, else E = now (the housekeeping's start). Flux
# releases a node only when its housekeeping exits, and never times it out;
# with gracewatch, a node whose teardown exceeds G is latched DOWN with a
# diagnosis, and drained by an aggregator running actuator-flux.toml. The
# wrapper exits with the real housekeeping's status (128+N if killed by
# signal N); if the wrapper is killed, the agent keeps supervising.
set -eu
: "${FLUX_JOB_ID:?not run by Flux: FLUX_JOB_ID is not set}"
case $FLUX_JOB_ID in
*[!0-9]*)
	if ! id=$(flux job id --to=dec "$FLUX_JOB_ID"); then
		echo "gracewatch: cannot convert job id $FLUX_JOB_ID to decimal; supervising it as $FLUX_JOB_ID" >&2
		id=$FLUX_JOB_ID
	fi
	;;
*) id=$FLUX_JOB_ID ;;
esac
# The job's owner, for a job the prolog did not register (see flux-prolog.sh).
user=
if [ -n "${FLUX_JOB_USERID:-}" ]; then
	user=$(getent passwd "$FLUX_JOB_USERID" | cut -d: -f1) || true
	user=${user:-$FLUX_JOB_USERID}
fi
exec /usr/sbin/nodeagent epilog --job "$id" ${user:+--user "$user"} -- /etc/flux/system/housekeeping.real
