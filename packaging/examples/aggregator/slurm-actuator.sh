#!/bin/sh
# Slurm actuator for gracewatch-aggregator (see actuator-slurm.toml beside
# this file): drains a node with gracewatch's diagnosis and resumes it, and
# never touches a drain that is not gracewatch's own.
#
#   slurm-actuator.sh drain NODE REASON    (on = "down")
#   slurm-actuator.sh resume HOSTLIST      (on = "up"; "{nodes}": n[1-20,33])
#   slurm-actuator.sh reason NODE REASON   (on = "reason")
#
# Install on the aggregator hosts:
#   install -m 0755 slurm-actuator.sh /etc/gracewatch/slurm-actuator.sh
#
# drain sets State=DRAIN Reason="gracewatch: REASON", unless the node already
# has a reason that is neither gracewatch's nor "Epilog error": an
# administrator's drain ("admin: bad DIMM") or one of Slurm's own ("Kill task
# failed", "Not responding") is left as it is, so that a later resume by
# gracewatch cannot undo it. "Epilog error" is what slurmd says when the
# wrapped epilogue (the one gracewatch supervises) failed or timed out, for
# instance after gracewatch's SIGTERM at the deadline: gracewatch's reason
# replaces it, because it says what is hung. So does "Kill task failed",
# Slurm's reason for a job task it could not kill by UnkillableStepTimeout:
# the very condition gracewatch diagnoses (it names the task, its state and
# its wait channel), and one that is over when gracewatch resumes the node
# (every process of the job is gone by then).
#
# reason sets Reason="gracewatch: REASON" alone (no second drain) only if
# the node's current reason is gracewatch's: the diagnosis changed while the
# node stays drained, and Slurm's reason (sinfo -R) says what is true now.
#
# resume sets State=RESUME only on the nodes whose current reason starts
# with "gracewatch:", in one scontrol call for the whole hostlist (the
# aggregator gathers the nodes that come up within 2 s: an incident's
# hundreds of nodes resume in one run). An administrator who drains a node
# again after gracewatch did (scontrol update ... State=DRAIN Reason="...")
# replaces the reason, and gracewatch then leaves that node drained.
#
# Slurm has no compare-and-set for a node's state: an administrator's drain
# that lands between this script's read of the reason and its update (a few
# milliseconds) can still be overwritten. Both actions are idempotent; the
# script fails (and the aggregator retries it) only when scontrol fails.
set -eu

PREFIX="gracewatch:"

usage() {
	echo "usage: $0 drain NODE REASON | resume HOSTLIST | reason NODE REASON" >&2
	exit 2
}

# reason NODE prints the node's current reason, without the " [user@time]"
# that scontrol appends, or nothing if it has none.
reason() {
	out=$(scontrol show node "$1") || return 1
	printf '%s\n' "$out" | sed -n '/^[[:space:]]*Reason=/{
		s/^[[:space:]]*Reason=//
		s/ \[[^]]*@[^]]*\]$//
		p
		q
	}'
}

[ $# -ge 2 ] || usage
action=$1
node=$2
case $action in
drain)
	[ $# -eq 3 ] || usage
	current=$(reason "$node")
	case $current in
	"" | none | "$PREFIX"* | "Epilog error" | "Kill task failed") ;;
	*)
		echo "gracewatch: $node keeps its reason \"$current\"; not drained by gracewatch" >&2
		exit 0
		;;
	esac
	exec scontrol update NodeName="$node" State=DRAIN Reason="$PREFIX $3"
	;;
reason)
	[ $# -eq 3 ] || usage
	current=$(reason "$node")
	case $current in
	"$PREFIX"*)
		[ "$current" = "$PREFIX $3" ] && exit 0
		exec scontrol update NodeName="$node" Reason="$PREFIX $3"
		;;
	esac
	echo "gracewatch: $node keeps its reason \"$current\"; its reason is not gracewatch's to update" >&2
	;;
resume)
	[ $# -eq 2 ] || usage
	hosts=$(scontrol show hostnames "$node") || exit 1
	ours=""
	for host in $hosts; do
		current=$(reason "$host")
		case $current in
		"$PREFIX"*) ours="$ours${ours:+,}$host" ;;
		"") ;;
		*) echo "gracewatch: $host keeps its reason \"$current\"; not resumed by gracewatch" >&2 ;;
		esac
	done
	[ -n "$ours" ] || exit 0
	exec scontrol update NodeName="$(scontrol show hostlist "$ours")" State=RESUME
	;;
*)
	usage
	;;
esac
