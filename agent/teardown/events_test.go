package teardown

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/request"
)

// eventLog records what OnEvent is told.
type eventLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *eventLog) add(ev Event) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

// lines returns the events as "kind job detail".
func (l *eventLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ev := range l.evs {
		s := string(ev.Kind) + " " + ev.Job
		switch ev.Kind {
		case EventEscalation:
			s += " " + ev.Signal
		case EventReleased:
			s += fmt.Sprintf(" %s %v", ev.Outcome, ev.Duration)
		}
		out = append(out, s)
	}
	return out
}

func TestOnEvent(t *testing.T) {
	log := &eventLog{}
	h := newHarness(t, func(o *Options) { o.OnEvent = log.add })
	ctx := context.Background()
	// Job 1 ends within grace; job 2 ignores SIGTERM and goes after SIGKILL.
	h.start1("1", t0.Add(time.Hour).Format(time.RFC3339), "", "/foreign/1")
	h.start1("2", t0.Add(time.Hour).Format(time.RFC3339), "5s", "/foreign/2")
	h.cg.SetPopulated("/foreign/1", true)
	h.cg.SetPopulated("/foreign/2", true)
	h.s.EndJob(ctx, "1")
	h.s.EndJob(ctx, "2")
	h.advance(3 * time.Second)
	h.cg.SetPopulated("/foreign/1", false)
	h.status()
	h.advance(2 * time.Second)
	h.eventually("SIGTERM", func(st Status) bool { return st.Jobs[1].Escalation == escTerm })
	h.advance(10 * time.Second)
	h.cg.SetPopulated("/foreign/2", false)
	h.status()
	want := []string{
		"registered 1",
		"registered 2",
		"released 1 clean 3s",
		"overdue 2",
		"escalation 2 SIGTERM",
		"escalation 2 SIGKILL",
		"released 2 killed 15s",
	}
	if got := log.lines(); !slices.Equal(got, want) {
		t.Fatalf("events:\n%q\nwant:\n%q", got, want)
	}
}

// An epilogue that cannot start is told as such (the fake cgroups start
// nothing), after the registration it made.
func TestOnEventEpilogStartError(t *testing.T) {
	log := &eventLog{}
	h := newHarness(t, func(o *Options) { o.OnEvent = log.add })
	_, err := h.s.RunEpilog(context.Background(), "5", request.EpilogRequest{Argv: []string{"/bin/true"}}, nil)
	if err == nil {
		t.Fatal("the fake cgroups started an epilogue")
	}
	if got, want := log.lines(), []string{"registered 5", "epilog-start-error 5"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
}

// A state file that cannot be written is told (the agent's metrics count
// it): here state.json is a non-empty directory, so the rename fails.
func TestOnEventStateWriteError(t *testing.T) {
	log := &eventLog{}
	h := newHarness(t, func(o *Options) { o.OnEvent = log.add })
	path := filepath.Join(h.dir, "state.json")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.start1("6", t0.Add(time.Hour).Format(time.RFC3339), "", "")
	got := log.lines()
	if !slices.Equal(got, []string{"registered 6", "state-write-error "}) {
		t.Fatalf("events %q, want a registration and a state write error", got)
	}
	log.mu.Lock()
	err := log.evs[1].Err
	log.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v does not name %s", err, path)
	}
}

// TestGraceMismatchEvent: a registration whose scheduler plans with
// another G than the job's is told once (the agent's metric and log); the
// same G, a job's own --grace that matches, or no plan G are not; a bad
// plan G is refused by name.
func TestGraceMismatchEvent(t *testing.T) {
	log := &eventLog{}
	h := newHarness(t, func(o *Options) { o.OnEvent = log.add }) // G = 60 s
	exp := t0.Add(time.Hour).Format(time.RFC3339)
	for _, r := range []request.JobStartRequest{
		{Job: "same", Expiration: exp, PlanGrace: "1m"},
		{Job: "other", Expiration: exp, PlanGrace: "15s"},
		{Job: "own", Expiration: exp, Grace: "15s", PlanGrace: "15s"},
		{Job: "none", Expiration: exp},
	} {
		if _, err := h.s.StartJob(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, l := range log.lines() {
		if strings.HasPrefix(l, string(EventGraceMismatch)) {
			got = append(got, l)
		}
	}
	if !slices.Equal(got, []string{"grace-mismatch other"}) {
		t.Fatalf("mismatch events %q, want the job planned with 15 s alone", got)
	}
	_, err := h.s.StartJob(context.Background(), request.JobStartRequest{Job: "bad", Expiration: exp, PlanGrace: "-5s"})
	if err == nil || !strings.HasPrefix(err.Error(), "plan_grace: ") {
		t.Fatalf("a negative plan G: %v", err)
	}
}
