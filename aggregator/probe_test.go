package aggregator

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/meshfake"
	"github.com/gracewatch/gracewatch/aggregator/probe"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// probePolicy asks before it accuses, with the strictest view otherwise:
// no delay before a gone member is unreachable, and unreachable is down.
var probePolicy = view.Policy{ClockSkewAllowance: 2 * time.Second, UnreachableIsDown: true, ProbeWait: time.Second, ReachedFor: 15 * time.Second}

// prober is a harness whose node1 answers probes (while answer is true)
// with a ControlAck carrying meta, as a real agent does.
type prober struct {
	*harness
	answer chan bool // the next probes' fate, one per probe
}

func newProber(t *testing.T) *prober {
	h := newHarness(t, provenOnly, func(o *Options) { o.Policy = probePolicy })
	p := &prober{harness: h, answer: make(chan bool, 100)}
	return p
}

// answerWith makes node1 answer every probe with meta (nil: no answer).
func (p *prober) answerWith(meta *gwpb.Meta) {
	p.mesh.OnSend(func(node string, env *gwpb.Envelope) error {
		c := env.GetControl()
		if c.GetAction() != gwpb.Action_ACTION_PROBE || meta == nil {
			return nil
		}
		p.mesh.Deliver(node, &gwpb.Envelope{Body: &gwpb.Envelope_Ack{Ack: &gwpb.ControlAck{Id: c.GetId(), Ok: true, Meta: meta}}})
		return nil
	})
}

// probes returns how many probes of why ended with result.
func (p *prober) probes(why, result string) int {
	return int(counted(p.t, p.svc, "probes_total", "why", why, "result", result))
}

// waitProbes syncs until n probes of why ended with result.
func (p *prober) waitProbes(why, result string, n int) {
	p.t.Helper()
	if !testutil.Poll(testTimeout, func() bool { p.sync(); return p.probes(why, result) >= n }) {
		p.t.Fatalf("%d %s probes %s, want %d", p.probes(why, result), why, result, n)
	}
	p.sync()
}

// waitTimer waits until the probe's wait is armed on the fake clock.
func (p *prober) waitTimers(n int) {
	p.t.Helper()
	if !testutil.Poll(testTimeout, func() bool { return p.clk.Pending() >= n }) {
		p.t.Fatalf("%d timers pending, want %d", p.clk.Pending(), n)
	}
}

// A node that memberlist says is dead (one forged packet can make it so in
// every table) but that answers is served as it says, never unreachable
// nor down (even with unreachable_is_down), for as long as it answers;
// when it stops answering it goes down at most ReachedFor after its last
// answer.
func TestGoneNodeAskedBeforeAccused(t *testing.T) {
	p := newProber(t)
	up := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 3, State: gwpb.State_STATE_UP, SinceMs: t0.UnixMilli()}
	p.mesh.SetMember(meshfake.AgentMember("node1", nil, t0))
	p.update("node1", &gwpb.StateUpdate{Meta: up, StartedMs: t0.UnixMilli()})
	p.wantState("node1", view.StateUp)
	p.answerWith(up)
	p.clk.Advance(time.Second)

	p.status("node1", mesh.StatusDead)
	p.waitProbes(probe.Gone, "answered", 1)
	if n := p.wantState("node1", view.StateUp); n.Member != mesh.StatusAlive {
		t.Errorf("served member %q, want alive", n.Member)
	}
	// Asked again every ReachedFor/3 while memberlist says so.
	for i := 2; i <= 5; i++ {
		p.clk.Advance(probePolicy.ReachedFor / 3)
		p.waitProbes(probe.Gone, "answered", i)
		p.wantState("node1", view.StateUp)
	}
	// It stops answering (gone for real): the next probe's wait runs out.
	lastAnswer := p.clk.Now()
	p.answerWith(nil)
	p.clk.Advance(probePolicy.ReachedFor / 3)
	p.waitTimers(2) // the probe's wait, and the view's timer
	p.clk.Advance(probePolicy.ProbeWait)
	p.waitProbes(probe.Gone, "unanswered", 1)
	p.clk.Advance(lastAnswer.Add(probePolicy.ReachedFor).Sub(p.clk.Now()))
	p.sync()
	n := p.wantState("node1", view.StateDown)
	if n.Since.IsZero() || !n.Since.Equal(lastAnswer) {
		t.Errorf("down since %v, want the last answer %v: %+v", n.Since, lastAnswer, n)
	}
}

// A node that does not answer at all (a stopped agent, a dead host) is
// enforced as before: unreachable (here down) once the probe's wait is
// over.
func TestGoneNodeThatDoesNotAnswer(t *testing.T) {
	p := newProber(t)
	up := &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 3, State: gwpb.State_STATE_UP, SinceMs: t0.UnixMilli()}
	p.mesh.SetMember(meshfake.AgentMember("node1", nil, t0))
	p.update("node1", &gwpb.StateUpdate{Meta: up, StartedMs: t0.UnixMilli()})
	p.clk.Advance(time.Second)
	gone := p.clk.Now()
	p.status("node1", mesh.StatusDead)
	p.wantState("node1", view.StateUp) // asked, not yet accused
	p.waitTimers(2)
	p.clk.Advance(probePolicy.ProbeWait)
	p.waitProbes(probe.Gone, "unanswered", 1)
	n := p.wantState("node1", view.StateDown)
	if n.Since.IsZero() || !n.Since.Equal(gone) {
		t.Errorf("down since %v, want when memberlist said it went (%v)", n.Since, gone)
	}
}

// Before the central deadline a node in teardown is asked: an agent that
// finished its teardown, but whose update went astray (it had lost its
// aggregator in gossip), is not served down; one that does not answer (a
// stopped agent) is, on time, at D + allowance.
func TestCentralDeadlineAsksFirst(t *testing.T) {
	for _, answers := range []bool{true, false} {
		name := map[bool]string{true: "answers", false: "silent"}[answers]
		t.Run(name, func(t *testing.T) {
			p := newProber(t)
			d := t0.Add(time.Minute)
			td := &gwpb.StateUpdate{Meta: teardownMeta(1, 4, d), StartedMs: t0.UnixMilli(),
				Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "teardown", DeadlineMs: d.UnixMilli()}}}
			p.mesh.SetMember(meshfake.AgentMember("node1", nil, t0))
			p.update("node1", td)
			p.wantState("node1", view.StateTeardown)
			if answers {
				p.answerWith(&gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 5, State: gwpb.State_STATE_UP, SinceMs: d.UnixMilli()})
			}
			enforce := d.Add(probePolicy.ClockSkewAllowance)
			p.clk.Advance(enforce.Add(-probePolicy.ProbeWait).Sub(p.clk.Now()))
			p.sync()
			if answers {
				p.waitProbes(probe.Deadline, "answered", 1)
				p.wantState("node1", view.StateUp)
				p.clk.Advance(enforce.Add(time.Minute).Sub(p.clk.Now()))
				p.sync()
				p.wantState("node1", view.StateUp)
				return
			}
			p.waitTimers(2)
			p.clk.Advance(enforce.Sub(p.clk.Now()))
			p.sync()
			n := p.wantState("node1", view.StateDown)
			if n.Since.IsZero() || !n.Since.Equal(enforce) {
				t.Errorf("down since %v, want D + allowance %v", n.Since, enforce)
			}
			p.waitProbes(probe.Deadline, "unanswered", 1)
		})
	}
}
