#!/bin/sh
# gracewatch's reservations in Slurm: the [reservations] command of
# /etc/gracewatch/aggregator.toml (packaging/README.md, "The scheduler's
# plan"). While nodes tear down, the leading aggregator keeps a reservation
# on them until their free_at, so that Slurm's backfill plans them free then
# instead of "now" at every pass, and removes it the moment they are up or
# down.
#
# The aggregator runs it with a verb (no shell):
#   slurm-reservation.sh list
#       prints "NAME HOSTLIST END" (END in Unix seconds), one line per
#       reservation whose name begins with $GRACEWATCH_RESERVATION_PREFIX
#   slurm-reservation.sh create NAME HOSTLIST END
#       holds HOSTLIST from now until END
#   slurm-reservation.sh update NAME HOSTLIST END
#       the same reservation, holding HOSTLIST until END from now on
#   slurm-reservation.sh delete NAME
# and takes exit 0 as done. It refuses a NAME that does not begin with the
# prefix: an administrator's reservation is never changed or deleted.
#
# Privileges: creating, updating and deleting reservations needs root,
# SlurmUser or a Slurm Operator. Run the aggregator's user as an Operator
# (sacctmgr modify user gracewatch set adminlevel=operator, with slurmdbd) or
# give it these four commands through sudo.
#
# Flags: IGNORE_JOBS (the node still runs the job whose teardown hangs),
# OVERLAP (an administrator's reservation on the same node does not refuse
# it). Users=root: no user's job can run in it.
#
# Slurm rounds the start it plans after a reservation up to bf_resolution
# (SchedulerParameters, 60 s by default): with the default a node is planned
# free at most a minute after its free_at.
set -eu
set -f # hostlists hold brackets: no file name expansion
SCONTROL=${SCONTROL:-scontrol}
prefix=${GRACEWATCH_RESERVATION_PREFIX:-gracewatch_}

die() {
	echo "slurm-reservation.sh: $*" >&2
	exit 2
}

owned() {
	case $1 in
	"$prefix"*[!A-Za-z0-9_.-]*) die "refusing reservation $1: bad name" ;;
	"$prefix"?*) ;;
	*) die "refusing reservation $1: not gracewatch's (prefix $prefix)" ;;
	esac
}

# until END: Slurm's end as "now+SECONDS", which depends on neither this
# host's nor slurmctld's time zone (an absolute time is read in slurmctld's).
until_end() {
	case $1 in '' | *[!0-9]*) die "bad end time $1" ;; esac
	left=$(($1 - $(date +%s)))
	[ "$left" -ge 1 ] || left=1
	echo "now+$left"
}

hostlist() {
	case $1 in '' | *[!A-Za-z0-9_.,\[\]-]*) die "bad hostlist $1" ;; esac
	echo "$1"
}

verb=${1:-}
case $verb in
list)
	out=$("$SCONTROL" show reservation -o)
	echo "$out" | while read -r line; do
		name='' nodes='' end=''
		for f in $line; do
			case $f in
			ReservationName=*) name=${f#*=} ;;
			Nodes=*) nodes=${f#*=} ;;
			EndTime=*) end=${f#*=} ;;
			esac
		done
		case $name in
		"$prefix"?*) echo "$name ${nodes:-(null)} $(date -d "$end" +%s)" ;;
		esac
	done
	;;
create)
	[ $# -eq 4 ] || die "usage: create NAME HOSTLIST END"
	owned "$2"
	nodes=$(hostlist "$3")
	end=$(until_end "$4")
	exec "$SCONTROL" create reservation ReservationName="$2" Nodes="$nodes" \
		StartTime=now EndTime="$end" Users=root Flags=IGNORE_JOBS,OVERLAP
	;;
update)
	[ $# -eq 4 ] || die "usage: update NAME HOSTLIST END"
	owned "$2"
	nodes=$(hostlist "$3")
	end=$(until_end "$4")
	exec "$SCONTROL" update ReservationName="$2" Nodes="$nodes" EndTime="$end"
	;;
delete)
	[ $# -eq 2 ] || die "usage: delete NAME"
	owned "$2"
	exec "$SCONTROL" delete ReservationName="$2"
	;;
*)
	die "usage: slurm-reservation.sh list | create NAME HOSTLIST END | update NAME HOSTLIST END | delete NAME"
	;;
esac
