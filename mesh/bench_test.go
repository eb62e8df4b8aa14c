package mesh

import (
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// BenchmarkDeadDetection measures how long a member takes to see another,
// stopped without leaving, as dead: two members, per profile. Each
// iteration takes seconds; run with e.g. -benchtime 3x.
func BenchmarkDeadDetection(b *testing.B) {
	for _, profile := range []string{"local", "lan"} {
		b.Run(profile, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				set := func(o *Options) { o.Profile = profile }
				a := start(b, "a", gwpb.Role_ROLE_AGGREGATOR, set)
				x := start(b, "x", gwpb.Role_ROLE_AGENT, func(o *Options) { set(o); o.Config.Join = []string{a.Addr()} })
				waitFor(b, 10*time.Second, "a sees x", func() bool { return sees(a.Mesh, "x") })
				b.StartTimer()
				x.Shutdown()
				total += waitFor(b, 60*time.Second, "a sees x dead", func() bool { return statusOf(a.Mesh, "x") == StatusDead })
				b.StopTimer()
				a.Shutdown()
			}
			b.ReportMetric(total.Seconds()/float64(b.N), "s/detect")
		})
	}
}

// BenchmarkMetaPropagation measures how long a SetMeta takes to reach
// another member's Members() (three members, "lan" profile).
func BenchmarkMetaPropagation(b *testing.B) {
	lan := func(o *Options) { o.Profile = "lan" }
	a := start(b, "a", gwpb.Role_ROLE_AGGREGATOR, lan)
	x := start(b, "x", gwpb.Role_ROLE_AGENT, func(o *Options) { lan(o); o.Config.Join = []string{a.Addr()} })
	start(b, "y", gwpb.Role_ROLE_AGENT, func(o *Options) { lan(o); o.Config.Join = []string{a.Addr()} })
	waitFor(b, 10*time.Second, "a sees all", func() bool { return sees(a.Mesh, "x", "y") })
	b.ResetTimer()
	for i := range b.N {
		seq := uint64(i + 1)
		go x.SetMeta(&gwpb.Meta{Seq: seq})
		waitFor(b, 10*time.Second, "a sees the meta", func() bool {
			m, _ := member(a.Mesh, "x")
			return m.Meta.GetSeq() == seq
		})
	}
}
