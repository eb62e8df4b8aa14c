package meshlink

import (
	"testing"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

func TestLatchOf(t *testing.T) {
	c := diagnose.Cause{FSType: "lustre", Source: "mds@o2ib:/s", Mountpoint: "/s", Wchan: "ptlrpc_queue_wait", Class: diagnose.Unkillable,
		Counts: map[diagnose.Class]int{diagnose.Unkillable: 3, diagnose.Zombie: 1}, ExamplePID: 7, ExampleComm: "cp", Job: "41"}
	var u gwpb.StateUpdate
	latchOf(teardown.Status{Cause: &c, Clean: true}, &u)
	w := u.GetCause()
	if w.GetFstype() != "lustre" || w.GetMountpoint() != "/s" || w.GetUnkillable() != 3 || w.GetZombie() != 1 || w.GetExamplePid() != 7 ||
		w.GetJob() != "41" || !u.GetClean() || u.GetAdminDrain() {
		t.Errorf("StateUpdate %+v", &u)
	}
	latchOf(teardown.Status{AdminDrain: true}, &u)
	if u.GetCause() != nil || u.GetClean() || !u.GetAdminDrain() {
		t.Errorf("without a cause: %+v", &u)
	}
}
