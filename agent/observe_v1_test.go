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
// the filesystem seam of the real cgroup manager, on the real kernel.
func TestV1ReadsOnlyWhileObserved(t *testing.T) {
	cfs := &countingFS{FS: os.DirFS("/")}
	mgr, err := cgroup.New(cgroup.Options{Root: cgrouptest.TempRoot(t), FS: cfs})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	allow, _ := cgroup.ParseAllowList([]string{"freezer:/gwtest-*", filepath.Join(cgrouptest.Mount(t), "gwtest-*")})
	sup, err := teardown.New(teardown.Options{Node: "n", StateDir: t.TempDir(), Cgroups: cgroups{mgr, allow},
		Grace: time.Minute, KillWait: time.Second, UnkillableAfter: time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { sup.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	v2 := cgrouptest.TempRoot(t)
	if _, err := sup.StartJob(ctx, request.JobStartRequest{Job: "v2", Expiration: "0", Cgroup: v2}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if n := cfs.total(); n != 0 {
		t.Fatalf("%d reads through the v1 seam while no v1 cgroup is observed: %v", n, cfs.opens)
	}

	dir, rel := cgrouptest.TempV1(t, "freezer")
	if _, err := sup.StartJob(ctx, request.JobStartRequest{Job: "v1", Expiration: "0", Cgroup: "freezer:" + rel}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3500 * time.Millisecond)
	n := cfs.procsReads(dir)
	// One at registration, then one a second.
	if n < 3 || n > 5 {
		t.Fatalf("%d reads of %s/cgroup.procs in 3.5 s, want one a second", n, dir)
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
	time.Sleep(2500 * time.Millisecond)
	if got := cfs.procsReads(dir) - after; got != 0 {
		t.Fatalf("%d reads after the job was released", got)
	}
}
