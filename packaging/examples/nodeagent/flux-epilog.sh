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
# Flux runs housekeeping after each job, on each of its nodes, with
# FLUX_JOB_ID (decimal) and FLUX_JOB_USERID set (through the IMP, only if its
# [run.housekeeping] allowed-environment passes FLUX_*). The epilogue runs as
# the caller: root through the IMP; the instance owner ("flux") without it,
# which then must be in [api] allowed_uids of /etc/gracewatch/nodeagent.toml.
#
# The deadline is D = min(T_end, E) + G: E from flux-prolog.sh if the job was
# registered at its start, else E = now (the housekeeping's start). Flux
# releases a node only when its housekeeping exits; with gracewatch, a node
# whose teardown exceeds G is latched DOWN with a diagnosis, and drained by
# an aggregator running actuator-flux.toml.
set -eu
: "${FLUX_JOB_ID:?not run by Flux: FLUX_JOB_ID is not set}"
exec /usr/sbin/nodeagent epilog --job "$FLUX_JOB_ID" -- /etc/flux/system/housekeeping.real
