package aggregator

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/aggregator/actuate"
	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	aggmetrics "github.com/gracewatch/gracewatch/aggregator/metrics"
	"github.com/gracewatch/gracewatch/aggregator/probe"
	"github.com/gracewatch/gracewatch/aggregator/reservation"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/internal/hostinfo"
	"github.com/gracewatch/gracewatch/internal/metrics"
	"github.com/gracewatch/gracewatch/internal/metrics/metricstest"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// A cluster's morning, through the fake mesh and the fake clock, scraped
// from the real /metrics: n3's agent reports its grace violation 0.5 s
// after D, n2's agent goes silent and the central deadline puts it down 5 s
// (the allowance) after D, an administrator drains n4 (whose second and
// third actuators fail and time out), n5's meta stops decoding, n6 dies,
// and n3 comes back up.
func TestMetricsGolden(t *testing.T) {
	reg := metrics.NewRegistry(metrics.ProgramAggregator)
	none := 0
	acts := []actuate.Config{
		{On: actuate.OnDown, Command: []string{"true"}, Retries: &none},
		{On: actuate.OnDown, Command: []string{"sh", "-c", `[ "$0" != n4 ]`, "{node}"}, Retries: &none},
		{On: actuate.OnDown, Command: []string{"sh", "-c", `[ "$0" != n4 ] || exec sleep 10`, "{node}"},
			Timeout: config.Dur(200 * time.Millisecond), Retries: &none},
		{On: actuate.OnUp, Command: []string{"true"}, Retries: &none},
	}
	// A state dir with 40 GiB of 50 free.
	host := func(context.Context) hostinfo.Facts {
		return hostinfo.Facts{StateDir: "/var/lib/gracewatch-aggregator", StateDirFreeBytes: 40 << 30, StateDirSizeBytes: 50 << 30}
	}
	sched := reservation.NewFakeScheduler()
	h := newHarness(t, func(o *Options) { o.Registry, o.Actuators, o.Host = reg, acts, host }, withReservations(sched))
	// The planner's first list, at t0: the clock's steps below then give
	// exactly one more (a minute later).
	waitFor(t, "the reservations' first list", func() bool { return sched.Calls("list") == 1 })
	settle := func() {
		h.sync()
		waitFor(t, "the actuators to finish", func() bool { return !h.svc.act.Busy() })
	}
	d := at(time.Minute)
	for _, n := range []string{"n1", "n4", "n5", "n6"} {
		h.member(n, upMeta(1, 1))
	}
	h.member("n2", teardownMeta(1, 2, d))
	h.member("n3", teardownMeta(1, 2, d))
	h.member("n4", downMeta(1, 2, "drained by root: disk"))
	h.mesh.SetMember(mesh.Member{Name: "n5", Status: mesh.StatusAlive, Since: t0, MetaErr: errors.New("proto: cannot parse invalid wire-format data")})
	h.status("n6", mesh.StatusDead)
	h.advance(time.Minute + 500*time.Millisecond)
	h.update("n3", &gwpb.StateUpdate{Meta: downMeta(1, 3, "job 7 teardown exceeded grace 1m0s"),
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(d)}}})
	h.advance(4500 * time.Millisecond)
	h.wantState("n2", view.StateDown)
	h.wantState("n3", view.StateDown)
	settle()
	h.member("n3", upMeta(1, 4))
	settle()
	h.wantState("n3", view.StateUp)
	// n7 tears down, free at D7 (its node_free_at_timestamp_seconds).
	h.member("n7", teardownMeta(1, 2, at(10*time.Minute)))
	h.sync()
	h.wantState("n7", view.StateTeardown)
	// ... and is held in the scheduler until then (the reservation_*
	// families).
	waitHeld(h, sched, "n7 until +10m0s")
	// n8's agent observes: its overdue teardown is a would-be drain (its
	// node_would_drain_timestamp_seconds), and the cluster is mixed.
	h.member("n8", upMeta(1, 2))
	h.update("n8", &gwpb.StateUpdate{Meta: teardownMeta(1, 3, d), Mode: gwpb.Mode_MODE_OBSERVE,
		Teardowns: []*gwpb.Teardown{{Job: "8", Phase: "overdue", DeadlineMs: ms(d)}}})
	h.sync()
	h.wantState("n8", view.StateTeardown)

	sub := h.svc.Subscribe("")
	defer sub.Close()
	base := h.serve(httpapi.ServerOptions{Registry: reg})
	for _, r := range []struct {
		method, path string
		code         int
	}{
		{"GET", "/v1/nodes", 200},
		{"GET", "/v1/nodes/n1", 200},
		{"GET", "/v1/nodes/n1", 200},
		{"GET", "/v1/nodes/zz", 404},
		{"POST", "/v1/nodes/n1/drain", 403},
		{"DELETE", "/v1/nodes", 405},
		{"FOO", "/v1/nodes", 405},
		{"GET", "/nope/secret-42", 404},
	} {
		req, _ := http.NewRequest(r.method, base+r.path, strings.NewReader(`{"reason":"x"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != r.code {
			t.Fatalf("%s %s: %d, want %d", r.method, r.path, resp.StatusCode, r.code)
		}
	}
	got := metricstest.ScrapeURL(t, base+"/metrics", nil)
	metricstest.Golden(t, filepath.Join("testdata", "metrics.golden"), got, *update)
	if strings.Contains(string(got), "secret-42") {
		t.Error("/metrics carries a raw path")
	}
	// Node names are labels only of the per-node families.
	for line := range strings.Lines(string(got)) {
		if strings.Contains(line, `node="`) && !strings.HasPrefix(line, "gracewatch_aggregator_node_") {
			t.Errorf("a node label outside the per-node families: %s", line)
		}
	}

	metricstest.Lint(t, reg)
	metricstest.LintCollectors(t, h.svc.met.Collectors()...)
}

// Two Services cannot share a registry: the second one's metrics would
// collide with the first's.
func TestMetricsRegistryConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Name: "a", Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Name: "b", Registry: reg}); err == nil {
		t.Fatal("a second Service registered its metrics in the same registry")
	}
}

func TestViolationDeadline(t *testing.T) {
	d := at(time.Minute)
	p := defaultPolicy
	overdue := &gwpb.StateUpdate{Meta: downMeta(1, 3, "violation"),
		Teardowns: []*gwpb.Teardown{{Job: "7", Phase: "overdue", DeadlineMs: ms(d)}, {Job: "8", Phase: "teardown", DeadlineMs: ms(at(time.Hour))}}}
	for _, tc := range []struct {
		name   string
		in     view.NodeInput
		cause  string
		prevAt time.Time
		now    time.Time
		want   time.Time
	}{
		{name: "agent report names the overdue teardown", in: view.NodeInput{Name: "n", Update: updateIn(overdue), Direct: intake.DecodeMeta(overdue.Meta)},
			cause: view.CauseAgent, now: d.Add(time.Second), want: d},
		{name: "agent down after the served teardown", in: alive("n", downMeta(1, 3, "x")),
			cause: view.CauseAgent, prevAt: d.Add(p.ClockSkewAllowance), now: d.Add(2 * time.Second), want: d},
		{name: "drain before D", in: alive("n", downMeta(1, 3, "drained")),
			cause: view.CauseAgent, prevAt: d.Add(p.ClockSkewAllowance), now: d.Add(-time.Second)},
		{name: "drain from up", in: alive("n", downMeta(1, 3, "drained")), cause: view.CauseAgent, now: d},
		{name: "central deadline", in: alive("n", teardownMeta(1, 2, d)),
			cause: view.CauseCentralDeadline, now: d.Add(p.ClockSkewAllowance), want: d},
		{name: "unreachable is down", in: alive("n", nil), cause: view.CauseUnreachable, now: d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := view.ViolationDeadline(&tc.in, tc.cause, tc.prevAt, tc.now, p)
			if ok != !tc.want.IsZero() || !got.Equal(tc.want) {
				t.Fatalf("violationDeadline = %v %v, want %v", got, ok, tc.want)
			}
		})
	}
}

// counted returns the value of the Service's metric
// gracewatch_aggregator_<name> whose labels are labels (name, value
// pairs), as a scrape would read it; 0 when there is no such series.
func counted(t testing.TB, svc *Service, name string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range svc.met.Collectors() {
		reg.MustRegister(c)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "gracewatch_aggregator_"+name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

// The probes' reasons whose series exist from the start are the ones the
// probes give.
func TestProbeReasonsAreTheMetricsLabels(t *testing.T) {
	if probe.Deadline != aggmetrics.ProbeDeadline || probe.Gone != aggmetrics.ProbeGone {
		t.Errorf("probe reasons %q %q, the metrics' %q %q", probe.Deadline, probe.Gone, aggmetrics.ProbeDeadline, aggmetrics.ProbeGone)
	}
}
