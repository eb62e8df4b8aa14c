package jobs

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// Every node is asked, at most jobParallel at once; each answer is in the
// result at its node's place, counted, and the failures logged once.
func TestRegister(t *testing.T) {
	nodes := make([]string, 3*jobParallel)
	for i := range nodes {
		nodes[i] = "n" + strconv.Itoa(i)
	}
	var inFlight, most atomic.Int32
	register := func(_ context.Context, node string, reg *gwpb.JobRegistration, by string) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if reg.GetJob() != "7" || by != "slurmctld" {
			t.Errorf("%s asked for job %q by %q", node, reg.GetJob(), by)
		}
		if node == "n1" {
			return errors.New("refused")
		}
		return nil
	}
	logs := &testutil.SyncBuffer{}
	res := Register(context.Background(), api.JobRequest{Job: "7"}, nodes, "slurmctld", slog.New(slog.NewTextHandler(logs, nil)), register)
	if res.Registered != len(nodes)-1 || res.Failed != 1 || res.Nodes[1].OK || res.Nodes[1].Error != "refused" || res.Nodes[2].Node != "n2" {
		t.Errorf("result %+v", res)
	}
	if m := most.Load(); m > jobParallel {
		t.Errorf("%d registrations at once, at most %d", m, jobParallel)
	}
	if got := logs.String(); !strings.Contains(got, "job not registered on every node") || !strings.Contains(got, "first=n1") {
		t.Errorf("log:\n%s", got)
	}
}
