package agent

import (
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/cgroup"
	"github.com/gracewatch/gracewatch/agent/cgroup/cgrouptest"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/agent/teardown"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// countingFS records the files opened through the cgroup manager's FS seam:
// the reads of v1 hierarchies.
type countingFS struct {
	fs.FS
	mu    sync.Mutex
	opens []string
}

func (c *countingFS) Open(name string) (fs.File, error) {
	c.mu.Lock()
	c.opens = append(c.opens, name)
	c.mu.Unlock()
	return c.FS.Open(name)
}

// procsReads counts the opens of cgroup.procs files below dir.
func (c *countingFS) procsReads(dir string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, o := range c.opens {
		if strings.HasPrefix("/"+o, dir) && strings.HasSuffix(o, "/cgroup.procs") {
			n++
		}
	}
	return n
}

func (c *countingFS) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.opens)
}

// 4. No read of any v1 hierarchy while no v1 cgroup is observed; one a
// second while one is, and none after its job is released. Counted through
// the filesystem seam of the real cgroup manager, on the real kernel; the
// seconds are those of a fake clock, stepped by the test, so that every
// poll the supervisor would make has been made when the reads are counted.
func TestV1ReadsOnlyWhileObserved(t *testing.T) {
	cfs := &countingFS{FS: os.DirFS("/")}
	mgr, err := cgroup.New(cgroup.Options{Root: cgrouptest.TempRoot(t), FS: cfs})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	allow, _ := cgroup.ParseAllowList([]string{"freezer:/gwtest-*", filepath.Join(cgrouptest.Mount(t), "gwtest-*")})
	clk := clock.NewFake(time.Now())
	sup, err := teardown.New(teardown.Options{Node: "n", StateDir: t.TempDir(), Cgroups: cgroups{mgr, allow}, Clock: clk,
		Grace: time.Minute, KillWait: time.Second, UnkillableAfter: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sup.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	// step moves the clock by d, a second at a time, and returns once the
	// main loop has handled what each second made due: the timers' posts
	// run on the loop in order, before a Status asked after them.
	step := func(d time.Duration) {
		t.Helper()
		for ; d > 0; d -= time.Second {
			clk.Advance(min(d, time.Second))
			if _, err := sup.Status(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	v2 := cgrouptest.TempRoot(t)
	if _, err := sup.StartJob(ctx, request.JobStartRequest{Job: "v2", Expiration: "0", Cgroup: v2}); err != nil {
		t.Fatal(err)
	}
	step(5 * time.Second)
	if n := cfs.total(); n != 0 {
		t.Fatalf("%d reads through the v1 seam in 5 s while no v1 cgroup is observed: %v", n, cfs.opens)
	}

	dir, rel := cgrouptest.TempV1(t, "freezer")
	if _, err := sup.StartJob(ctx, request.JobStartRequest{Job: "v1", Expiration: "0", Cgroup: "freezer:" + rel}); err != nil {
		t.Fatal(err)
	}
	step(3500 * time.Millisecond)
	n := cfs.procsReads(dir)
	// One at registration, then one a second.
	if n != 4 {
		t.Fatalf("%d reads of %s/cgroup.procs in 3.5 s, want one at registration and one a second (4)", n, dir)
	}
	if _, err := sup.EndJob(ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	st, _ := sup.Status(ctx)
	for _, j := range st.Jobs {
		if j.ID == "v1" && j.Phase != api.PhaseReleased {
			t.Fatalf("job v1 %s after its end with an empty cgroup", j.Phase)
		}
	}
	after := cfs.procsReads(dir)
	step(5 * time.Second)
	if got := cfs.procsReads(dir) - after; got != 0 {
		t.Fatalf("%d reads in 5 s after the job was released", got)
	}
}
