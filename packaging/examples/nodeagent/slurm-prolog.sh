#!/bin/sh
# Slurm Prolog for gracewatch: tells the node agent in which cgroup Slurm
# runs the job's tasks, so that the agent sees them (read-only): a task
# still there at the job's deadline E + G is named in the node's DOWN
# reason ("job 41 not ended by its deadline (E + 2m0s): 1 unkillable (pid
# 5814 a.out, D in request_wait_answer, fuse /scratch)"), and the job's
# end is seen when the cgroup empties, even if Slurm never runs the Epilog.
# E itself comes from the controller (slurm-prolog-ctld.sh beside the
# aggregator's examples): Slurm gives this Prolog no time limit.
#
# Install on every compute node:
#   install -m 0755 slurm-prolog.sh /etc/slurm/gracewatch-prolog.sh
# and in slurm.conf: Prolog=/etc/slurm/gracewatch-prolog.sh (or call it
# from the site's own Prolog).
#
# The cgroup: Slurm's proctrack/cgroup with cgroup.conf CgroupPlugin=
# cgroup/v1 (RHEL 8 sites; Debian 12's Slurm 22.05 on a hybrid host) puts a
# job's tasks in freezer:/slurm_<node>/uid_<uid>/job_<id> (or /slurm/...,
# by how slurmd was built); with CgroupPlugin=cgroup/v2 in
# 0::/system.slice/slurmstepd.scope/job_<id>. Slurm makes it when the
# job's first step starts, after this Prolog: the agent accepts a cgroup
# (v1 or v2) that does not exist yet and looks for it while the job runs. The
# agent's [teardown] foreign_cgroups must admit it (its default does).
#
# The job's user (SLURM_JOB_USER, else SLURM_JOB_UID resolved with getent,
# else the uid itself) goes with the registration: the agent's reports, its
# logs and the cluster's teardown history name it. A name the agent does not
# accept is dropped with a warning, never the job.
#
# The Prolog runs as root; it never fails (a failing Prolog drains the
# node): a problem is said on standard error and the script exits 0.
: "${SLURM_JOB_ID:?not run by slurmd: SLURM_JOB_ID is not set}"
NODEAGENT=/usr/sbin/nodeagent
node=${SLURMD_NODENAME:-$(hostname -s)}
uid=${SLURM_JOB_UID:?not run by slurmd: SLURM_JOB_UID is not set}
user=${SLURM_JOB_USER:-}
if [ -z "$user" ]; then
	user=$(getent passwd "$uid" | cut -d: -f1) || true
	user=${user:-$uid}
fi
if [ -d "/sys/fs/cgroup/freezer/slurm" ] && [ ! -d "/sys/fs/cgroup/freezer/slurm_$node" ]; then
	cg="freezer:/slurm/uid_$uid/job_$SLURM_JOB_ID"
elif [ -d /sys/fs/cgroup/freezer ]; then
	cg="freezer:/slurm_$node/uid_$uid/job_$SLURM_JOB_ID"
else
	cg="0::/system.slice/slurmstepd.scope/job_$SLURM_JOB_ID"
fi
# The controller's registration (with E) may have come first: then only the
# cgroup is added. Registered here first, the job has no E until the
# controller's registration moves it in.
if ! out=$("$NODEAGENT" job start --job "$SLURM_JOB_ID" --expiration 0 --cgroup "$cg" --user "$user" 2>&1); then
	if ! out2=$("$NODEAGENT" job update --job "$SLURM_JOB_ID" --cgroup "$cg" --user "$user" 2>&1); then
		echo "gracewatch: job $SLURM_JOB_ID: cgroup $cg not registered with the node agent: $out; $out2" >&2
	fi
fi
exit 0
