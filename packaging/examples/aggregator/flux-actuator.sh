#!/bin/sh
# Flux actuator for gracewatch-aggregator (see actuator-flux.toml beside this
# file): drains a node with gracewatch's diagnosis and undrains it, and never
# touches a drain that is not gracewatch's own.
#
#   flux-actuator.sh drain NODE REASON    (on = "down")
#   flux-actuator.sh undrain NODE         (on = "up")
#
# Install on the aggregator hosts:
#   install -m 0755 flux-actuator.sh /etc/gracewatch/flux-actuator.sh
#
# NODE is a host name Flux knows (flux resource list -o '{nodelist}'); the
# agent's node_name must be that name. Flux keeps one drain reason per node,
# which this script reads back with
#   flux resource drain -n -i NODE -o '{statex} {reason}'
# (flux-core 0.88: the drain listing, limited to NODE).
#
# drain runs `flux resource drain NODE "gracewatch: REASON"`. Without --force
# Flux refuses to drain a node that is already drained (an atomic check on
# the broker), so an administrator's drain ("admin: bad DIMM") and Flux's
# own ("epilog failed for job ...", "broker was unresponsive") are never
# overwritten, and a later undrain by gracewatch cannot undo them. A node
# gracewatch drained before gets the new reason (--force).
#
# undrain runs `flux resource undrain NODE` only if the node's current reason
# starts with "gracewatch:". An administrator who drains the node again after
# gracewatch did (flux resource drain --force NODE "...") replaces the
# reason, and gracewatch then leaves the node drained. The read and the
# undrain are two requests: a --force drain by an administrator landing
# between them (milliseconds) can still be undone.
#
# Both actions are idempotent. The script exits non-zero, with what failed,
# when Flux cannot be asked (broker down, FLUX_URI wrong, NODE unknown to
# Flux): the aggregator logs that and retries with back-off.
#
# Environment: FLUX_URI (the instance; see actuator-flux.toml), FLUX (the
# flux command, default "flux" from PATH).
set -eu

PREFIX="gracewatch:"
FLUX=${FLUX:-flux}

usage() {
	echo "usage: $0 drain NODE REASON | undrain NODE" >&2
	exit 2
}

# current NODE prints "STATE REASON" for a drained or draining node, and
# nothing for one that is not drained; it fails if Flux cannot say.
current() {
	"$FLUX" resource drain -n -i "$1" -o '{statex} {reason}' ||
		{ echo "gracewatch: cannot read the drain state of $1 from Flux (FLUX_URI=${FLUX_URI:-unset})" >&2; return 1; }
}

[ $# -ge 2 ] || usage
action=$1
node=$2
case $action in
drain)
	[ $# -eq 3 ] || usage
	reason="$PREFIX $3"
	# Drain unless drained (one request, the common case), else see why.
	if err=$("$FLUX" resource drain "$node" "$reason" 2>&1); then
		exit 0
	fi
	if ! now=$(current "$node") || [ -z "$now" ]; then
		echo "gracewatch: flux resource drain $node failed: $err" >&2
		exit 1
	fi
	why=${now#* }
	[ "$why" != "$now" ] || why=""
	case $why in
	"$PREFIX"*)
		[ "$why" = "$reason" ] && exit 0
		exec "$FLUX" resource drain --force "$node" "$reason"
		;;
	esac
	echo "gracewatch: $node keeps its drain \"$why\" (${now%% *}); not drained by gracewatch" >&2
	;;
undrain)
	[ $# -eq 2 ] || usage
	now=$(current "$node")
	[ -n "$now" ] || exit 0
	why=${now#* }
	[ "$why" != "$now" ] || why=""
	case $why in
	"$PREFIX"*) exec "$FLUX" resource undrain "$node" ;;
	esac
	echo "gracewatch: $node keeps its drain \"$why\" (${now%% *}); not undrained by gracewatch" >&2
	;;
*)
	usage
	;;
esac
