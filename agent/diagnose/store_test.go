package diagnose

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func report(job string, at time.Time) *Report {
	return &Report{Version: ReportVersion, Job: job, Taken: at, Summary: "job " + job}
}

func TestStoreBoundAndLatest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "reports")
	s, err := NewStore(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir: %v %v, want mode 0700", fi.Mode(), err)
	}
	if _, err := s.Latest("1"); !errors.Is(err, ErrNoReport) {
		t.Errorf("Latest of an empty store: %v", err)
	}
	t0 := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	for i, job := range []string{"1", "2", "1", "3", "2"} {
		if _, err := s.Save(report(job, t0.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	paths, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	want := []string{
		"20261202T130200.000000000Z_1.json",
		"20261202T130300.000000000Z_3.json",
		"20261202T130400.000000000Z_2.json",
	}
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Errorf("files %q, want the newest 3, oldest first: %q", names, want)
	}
	r, err := s.Latest("2")
	if err != nil || !r.Taken.Equal(t0.Add(4*time.Minute)) {
		t.Errorf("Latest(2) = %+v, %v", r, err)
	}
	if r, err := s.Latest("1"); err != nil || !r.Taken.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("Latest(1) = %+v, %v", r, err)
	}
	if fi, err := os.Stat(paths[0]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("report file mode %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestStoreOddJobIDs(t *testing.T) {
	s, err := NewStore(t.TempDir(), 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	jobs := []string{
		"../../etc/passwd", "a/b", "a_b", ".hidden", "", "ƒ1 2\n3", "f3Kx9bLmQ",
		strings.Repeat("x", 500), "job~2", "1234.batch",
	}
	for i, job := range jobs {
		p, err := s.Save(report(job, t0.Add(time.Duration(i)*time.Second)))
		if err != nil {
			t.Fatalf("save %q: %v", job, err)
		}
		if filepath.Dir(p) != s.Dir() {
			t.Errorf("job %q saved outside the store: %s", job, p)
		}
		base := filepath.Base(p)
		if strings.HasPrefix(base, ".") || len(base) > 120 || strings.ContainsAny(base, "/\n ") {
			t.Errorf("job %q: unsafe file name %q", job, base)
		}
	}
	// a/b and a_b share a safe name: Latest goes by the report's job.
	for _, job := range jobs {
		r, err := s.Latest(job)
		if err != nil || r.Job != job {
			t.Errorf("Latest(%q) = %v, %v", job, r, err)
		}
	}
	if _, err := s.Latest("a?b"); !errors.Is(err, ErrNoReport) {
		t.Errorf("Latest of an unknown job sharing a safe name: %v", err)
	}
}

func TestStoreSameInstant(t *testing.T) {
	s, err := NewStore(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	a, err1 := s.Save(&Report{Job: "1", Taken: at, Stage: StageBeforeSignal})
	b, err2 := s.Save(&Report{Job: "1", Taken: at, Stage: StageAfterEscalation})
	if err1 != nil || err2 != nil || a == b {
		t.Fatalf("%s %v, %s %v: two reports of one instant must both be kept", a, err1, b, err2)
	}
	if r, err := s.Latest("1"); err != nil || r.Stage != StageAfterEscalation {
		t.Errorf("Latest = %+v, %v; want the one saved last", r, err)
	}
}

// TestStoreAtomic shows that a reader never sees a partial report and that
// a temporary file left by a crash is neither listed nor kept.
func TestStoreAtomic(t *testing.T) {
	dir := t.TempDir()
	crash := filepath.Join(dir, tempPrefix+"123")
	if err := os.WriteFile(crash, []byte(`{"job": "half`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(dir, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(crash); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}

	big := &Report{Job: "big", Summary: strings.Repeat("x", 1<<20)}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			paths, err := s.List()
			if err != nil {
				t.Error(err)
				return
			}
			for _, p := range paths {
				r, err := Load(p)
				if errors.Is(err, os.ErrNotExist) {
					continue // pruned between List and Load
				}
				if err != nil || len(r.Summary) != 1<<20 {
					t.Errorf("partial report %s: %v", p, err)
					return
				}
			}
		}
	}()
	var savers sync.WaitGroup
	for i := range 4 {
		savers.Add(1)
		go func() {
			defer savers.Done()
			for j := range 5 {
				r := *big
				r.Taken = time.Unix(int64(1000+i*10+j), 0)
				if _, err := s.Save(&r); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	savers.Wait()
	close(stop)
	wg.Wait()
	paths, _ := s.List()
	ents, _ := os.ReadDir(dir)
	if len(paths) != 5 || len(ents) != 5 {
		t.Errorf("%d reports, %d files after 20 saves, want 5 and 5 (no temporary files)", len(paths), len(ents))
	}
}

// TestStoreJobNames: ids that an earlier mapping gave one name each get
// their own report, and a long id's report is saved and found.
func TestStoreJobNames(t *testing.T) {
	st, err := NewStore(t.TempDir(), 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a:b", "a_b", "x613a62", strings.Repeat("ƒ", 64)}
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, id := range ids {
		if _, err := st.Save(&Report{Job: id, Summary: "s" + id, Taken: base.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatalf("save %q: %v", id, err)
		}
	}
	for _, id := range ids {
		r, err := st.Latest(id)
		if err != nil {
			t.Fatalf("latest %q: %v", id, err)
		}
		if r.Job != id || r.Summary != "s"+id {
			t.Errorf("latest %q = report of %q (%q)", id, r.Job, r.Summary)
		}
	}
}

func TestLegacyName(t *testing.T) {
	tests := map[string]string{
		"1234":                   "1234",
		"../x":                   "_._x",
		"a b/c":                  "a_b_c",
		"":                       "_",
		strings.Repeat("a", 100): strings.Repeat("a", 64),
	}
	for in, want := range tests {
		if got := legacyName(in); got != want {
			t.Errorf("legacyName(%q) = %q, want %q", in, got, want)
		}
	}
}
