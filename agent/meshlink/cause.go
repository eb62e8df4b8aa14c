package meshlink

import (
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// latchOf puts the node's latch facts for incidents into u (StateUpdate
// fields 40-42): the cause of its latched violations, whether it is clean,
// and whether an administrator's drain holds it.
func latchOf(st teardown.Status, u *gwpb.StateUpdate) {
	u.Cause = wireCause(st.Cause)
	u.Clean = st.Clean
	u.AdminDrain = st.AdminDrain
	u.Mode = gwpb.Mode_MODE_ENFORCE
	if st.Observe {
		u.Mode = gwpb.Mode_MODE_OBSERVE
		u.ObservedCause = wireCause(st.ObservedCause)
	}
}

// wireCause is c as the mesh carries it; nil for none. c's fields are
// within the schema's bounds already (diagnose.CauseOf).
func wireCause(c *diagnose.Cause) *gwpb.Cause {
	if c == nil || c.Empty() {
		return nil
	}
	u32 := func(cl diagnose.Class) uint32 { return uint32(max(c.Counts[cl], 0)) }
	return &gwpb.Cause{
		Fstype:      c.FSType,
		Source:      c.Source,
		Mountpoint:  c.Mountpoint,
		Wchan:       c.Wchan,
		Class:       string(c.Class),
		Unkillable:  u32(diagnose.Unkillable),
		ExitHang:    u32(diagnose.ExitHang),
		KillableD:   u32(diagnose.KillableD),
		Missed:      u32(diagnose.Missed),
		Dying:       u32(diagnose.Dying),
		Zombie:      u32(diagnose.Zombie),
		ExamplePid:  int32(min(c.ExamplePID, 1<<31-1)),
		ExampleComm: c.ExampleComm,
		Job:         c.Job,
	}
}
