package history

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func rec(node string, job int, start time.Time, dur time.Duration) Record {
	return Record{Node: node, Job: []byte(fmt.Sprint(job)), User: "alice", Command: "epilog", StartMs: start.UnixMilli(),
		ReleasedMs: start.Add(dur).UnixMilli(), GraceMs: 120000, Outcome: OutcomeClean}
}

func open(t *testing.T, dir string, o Options, now time.Time) *Store {
	t.Helper()
	o.Dir = dir
	s, err := Open(o, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func count(t *testing.T, s *Store) (n int, jobs []string) {
	t.Helper()
	if err := s.Scan(0, 1<<62, func(r *Record) bool { n++; jobs = append(jobs, r.JobString()); return true }); err != nil {
		t.Fatal(err)
	}
	return n, jobs
}

func TestStoreDedupeAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{}, t0)
	for i := range 100 {
		if why := s.Add(rec("n1", i, t0.Add(-time.Hour+time.Duration(i)*time.Second), 5*time.Second), t0); why != "" {
			t.Fatalf("record %d: %s", i, why)
		}
	}
	if why := s.Add(rec("n1", 99, t0.Add(-time.Hour+99*time.Second), 5*time.Second), t0); why != RefusedDuplicate {
		t.Errorf("resend: %q", why)
	}
	// Same job id, another start: another teardown (a requeued job).
	if why := s.Add(rec("n1", 99, t0.Add(-time.Minute), 5*time.Second), t0); why != "" {
		t.Errorf("requeued job: %q", why)
	}
	// Another node, the same job and start: its own record.
	if why := s.Add(rec("n2", 99, t0.Add(-time.Hour+99*time.Second), 5*time.Second), t0); why != "" {
		t.Errorf("other node: %q", why)
	}
	s.Close()
	s = open(t, dir, Options{}, t0)
	if n, _ := count(t, s); n != 102 {
		t.Errorf("%d records after reopen, want 102", n)
	}
	// The last 64 resent after the restart: all duplicates.
	for i := 36; i < 100; i++ {
		if why := s.Add(rec("n1", i, t0.Add(-time.Hour+time.Duration(i)*time.Second), 5*time.Second), t0); why != RefusedDuplicate {
			t.Fatalf("resend %d after restart: %q", i, why)
		}
	}
	if why := s.Add(rec("n1", 100, t0, time.Second), t0.Add(time.Second)); why != "" {
		t.Errorf("new after restart: %q", why)
	}
	if n, _ := count(t, s); n != 103 {
		t.Errorf("%d records, want 103", n)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d segment files, want 1 (a restart appends to the last one)", len(ents))
	}
}

func TestStoreRefusals(t *testing.T) {
	s := open(t, t.TempDir(), Options{NodeBurst: 10, NodeRate: 1}, t0)
	bad := rec("n1", 1, t0, time.Second)
	bad.ReleasedMs = bad.StartMs - 1000
	future := rec("n1", 2, t0.Add(2*time.Hour), time.Second)
	old := rec("n1", 3, t0.Add(-100*24*time.Hour), time.Second)
	nojob := rec("n1", 4, t0, time.Second)
	nojob.Job = nil
	for want, r := range map[Refusal]Record{RefusedClock: bad, RefusedFuture: future, RefusedOld: old, RefusedInvalid: nojob} {
		if why := s.Add(r, t0); why != want {
			t.Errorf("want %s, got %q", want, why)
		}
	}
	hostile := rec("n1", 5, t0.Add(-time.Hour), time.Second)
	hostile.User, hostile.Command = "root\n; rm", "a\x00b"
	if why := s.Add(hostile, t0); why != "" {
		t.Fatal(why)
	}
	// The rate bound: 9 more (the burst of 10), then refused, then one
	// more after a second.
	for i := range 9 {
		if why := s.Add(rec("n1", 100+i, t0.Add(-time.Hour), time.Second), t0); why != "" {
			t.Fatalf("%d: %s", i, why)
		}
	}
	if why := s.Add(rec("n1", 200, t0.Add(-time.Hour), time.Second), t0); why != RefusedRate {
		t.Errorf("past the burst: %q", why)
	}
	if why := s.Add(rec("n2", 200, t0.Add(-time.Hour), time.Second), t0); why != "" {
		t.Errorf("another node is not limited by n1: %q", why)
	}
	if why := s.Add(rec("n1", 201, t0.Add(-time.Hour), time.Second), t0.Add(time.Second)); why != "" {
		t.Errorf("a second later: %q", why)
	}
	st := s.Stats()
	if st.Refused[RefusedRate] != 1 || st.UsersDropped != 1 || st.Records != 12 {
		t.Errorf("stats %+v", st)
	}
	s.Scan(0, 1<<62, func(r *Record) bool {
		if r.JobString() == "5" && (r.User != "" || r.Command != "") {
			t.Errorf("hostile user/command kept: %q %q", r.User, r.Command)
		}
		return true
	})
}

func segFiles(t *testing.T, dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	return m
}

func TestStoreTornTail(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, Options{}, t0)
	for i := range 10 {
		s.Add(rec("n1", i, t0.Add(-time.Hour), time.Second), t0)
	}
	s.Close()
	f := segFiles(t, dir)[0]
	whole, _ := os.ReadFile(f)
	// A crash during a write: half a record frame, then (another case)
	// zeros of blocks allocated, never written.
	for _, tail := range [][]byte{appendRecord(nil, &Record{Node: "n1", Job: []byte("77"), StartMs: 1}, ids{node: 1})[:20], make([]byte, 8192)} {
		if err := os.WriteFile(f, append(bytes.Clone(whole), tail...), 0o640); err != nil {
			t.Fatal(err)
		}
		s = open(t, dir, Options{}, t0)
		if n, _ := count(t, s); n != 10 {
			t.Errorf("%d records after a torn tail, want 10", n)
		}
		if why := s.Add(rec("n1", 10, t0.Add(-time.Hour), time.Second), t0); why != "" {
			t.Fatal(why)
		}
		s.Close()
		s = open(t, dir, Options{}, t0)
		if n, _ := count(t, s); n != 11 {
			t.Errorf("%d records after appending past the truncation, want 11", n)
		}
		if st := s.Stats(); st.Corrupt != 0 {
			t.Errorf("a torn tail reported as corrupt: %+v", st)
		}
		s.Close()
		os.WriteFile(f, whole, 0o640)
	}
}

func TestStoreCorruptSegment(t *testing.T) {
	dir := t.TempDir()
	// Small segments: 1 MiB bound, 256 KiB segments.
	s := open(t, dir, Options{MaxBytes: MinMaxBytes, NodeBurst: 1 << 20}, t0)
	n := 0
	for len(segFiles(t, dir)) < 3 {
		s.Add(rec(fmt.Sprintf("n%d", n%50), n, t0.Add(-time.Hour), time.Second), t0)
		n++
	}
	s.Close()
	files := segFiles(t, dir)
	b, _ := os.ReadFile(files[0])
	b[len(b)/2] ^= 0xff
	os.WriteFile(files[0], b, 0o640)
	s = open(t, dir, Options{MaxBytes: MinMaxBytes, NodeBurst: 1 << 20}, t0)
	got, _ := count(t, s)
	st := s.Stats()
	if st.Corrupt != 1 || got >= n || got < n/3 {
		t.Errorf("corrupt first segment: %d of %d records read, stats %+v", got, n, st)
	}
	// The damaged segment is never appended to; new records go on.
	if why := s.Add(rec("n1", 1<<30, t0.Add(-time.Minute), time.Second), t0); why != "" {
		t.Fatal(why)
	}
	if after, _ := count(t, s); after != got+1 {
		t.Errorf("after an add: %d, want %d", after, got+1)
	}
}

func TestStoreBounds(t *testing.T) {
	dir := t.TempDir()
	o := Options{MaxBytes: MinMaxBytes, NodeBurst: 1 << 30, NodeRate: 1e9}
	s := open(t, dir, o, t0)
	for i := range 60000 { // ~3 MB of records into 1 MiB
		s.Add(rec(fmt.Sprintf("n%d", i%100), i, t0.Add(-time.Hour+time.Duration(i)*time.Millisecond), time.Second), t0)
	}
	s.Flush(t0)
	var size int64
	for _, f := range segFiles(t, dir) {
		fi, _ := os.Stat(f)
		size += fi.Size()
	}
	st := s.Stats()
	if size > MinMaxBytes || st.Bytes != size || st.DroppedBytes == 0 {
		t.Errorf("%d bytes on disk (stats %d), bound %d; dropped %d", size, st.Bytes, MinMaxBytes, st.DroppedBytes)
	}
	// The newest are kept, the oldest dropped.
	_, jobs := count(t, s)
	if jobs[len(jobs)-1] != "59999" || jobs[0] == "0" {
		t.Errorf("kept %s..%s", jobs[0], jobs[len(jobs)-1])
	}
	// By age: 100 days later everything is past 90 days.
	s.Close()
	s = open(t, dir, o, t0.Add(100*24*time.Hour))
	if st := s.Stats(); st.Records != 0 || st.Bytes != 0 {
		t.Errorf("after 100 days: %+v", st)
	}
}

// TestRecordBounds: a record past what an agent enforces is refused (a
// grace past 7 days; a self-ended teardown longer than the longest G plus
// kill path, 8 days), or kept as that long (a hung one: a lower bound);
// the values at the bounds are kept as they are.
func TestRecordBounds(t *testing.T) {
	s := open(t, t.TempDir(), Options{NodeBurst: 1 << 30, NodeRate: 1e9}, t0)
	start := t0.Add(-20 * 24 * time.Hour)
	with := func(job int, d time.Duration, grace int64, o Outcome) Record {
		r := rec("n1", job, start, d)
		r.GraceMs, r.Outcome = grace, o
		return r
	}
	maxD := time.Duration(MaxDurationMs) * time.Millisecond
	for _, tc := range []struct {
		name string
		r    Record
		want Refusal
		dur  int64 // stored duration, ms
	}{
		{"grace at the bound", with(1, time.Second, MaxGraceMs, OutcomeClean), "", 1000},
		{"grace past it", with(2, time.Second, MaxGraceMs+1, OutcomeClean), RefusedBounds, 0},
		{"negative grace", with(3, time.Second, -1, OutcomeClean), RefusedInvalid, 0},
		{"self-ended at the bound", with(4, maxD, 120000, OutcomeExited), "", MaxDurationMs},
		{"self-ended past it", with(5, maxD+time.Millisecond, 120000, OutcomeClean), RefusedBounds, 0},
		{"20 days, ended by itself", with(6, 20*24*time.Hour, 120000, OutcomeExited), RefusedBounds, 0},
		{"20 days hung", with(7, 20*24*time.Hour, 120000, OutcomeHung), "", MaxDurationMs},
		{"20 days unreported", with(8, 20*24*time.Hour, 120000, OutcomeUnreported), "", MaxDurationMs},
	} {
		if why := s.Add(tc.r, t0); why != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, why, tc.want)
		}
		if tc.want != "" {
			continue
		}
		s.Scan(0, 1<<62, func(r *Record) bool {
			if r.JobString() == string(tc.r.Job) && r.DurationMs() != tc.dur {
				t.Errorf("%s: stored %d ms, want %d", tc.name, r.DurationMs(), tc.dur)
			}
			return true
		})
	}
	if st := s.Stats(); st.Refused[RefusedBounds] != 3 || st.Records != 4 {
		t.Errorf("stats %+v", st)
	}
}

func TestUserRule(t *testing.T) {
	for u, ok := range map[string]bool{"alice": true, "svc.batch-1": true, "MACHINE$": true, "a_b": true, "": false, "-x": false,
		"$": false, "a$b": false, "root;rm": false, "ü": false, strings.Repeat("a", 65): false, strings.Repeat("a", 64): true} {
		if validUser(u) != ok {
			t.Errorf("%q: %v", u, !ok)
		}
	}
}

// FuzzSegment feeds the segment decoder arbitrary files (a file is input
// after a crash): it never panics, never reads past the limit, and what it
// decodes is well formed.
func FuzzSegment(f *testing.F) {
	b := []byte(magic)
	b = appendFrame(b, kindString, []byte("n1"))
	b = appendRecord(b, &Record{Node: "n1", Job: []byte("42"), StartMs: 1000, ReleasedMs: 5000, GraceMs: 2000, Outcome: OutcomeHung}, ids{node: 1})
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Add([]byte(magic))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := readSegment(bytes.NewReader(data), int64(len(data)), func(r *Record) bool {
			if r.Node == "" || r.Outcome >= numOutcomes || r.DurationMs() < 0 || len(r.Job) == 0 {
				t.Fatalf("bad record %+v", r)
			}
			return true
		})
		if n > int64(len(data)) || (err == nil && n != int64(len(data))) {
			t.Fatalf("read %d of %d bytes, err %v", n, len(data), err)
		}
	})
}

// TestStoreLateStarts: releases of teardowns that hung for days (their
// start far behind the others') join the current segment instead of
// rotating it twice each (at 64 segments, the oldest history would be
// dropped for nothing); in-order starts still rotate at 1/32 of max_age.
func TestStoreLateStarts(t *testing.T) {
	s := open(t, t.TempDir(), Options{NodeBurst: 1 << 20, NodeRate: 1e9}, t0)
	for i := range 100 {
		s.Add(rec("n1", i, t0.Add(-time.Hour+time.Duration(i)*time.Second), time.Second), t0)
		if i%10 == 0 {
			s.Add(rec(fmt.Sprintf("h%d", i), i, t0.Add(-3*24*time.Hour), 3*24*time.Hour-time.Minute), t0)
		}
	}
	if st := s.Stats(); st.Segments != 1 || st.Records != 110 {
		t.Errorf("%d segments, %d records: want 1 and 110", st.Segments, st.Records)
	}
	// Starts in order over 10 days: 90 days / 32 = 2.8 days a segment.
	s2 := open(t, t.TempDir(), Options{NodeBurst: 1 << 20, NodeRate: 1e9}, t0)
	for i := range 240 {
		s2.Add(rec("n1", i, t0.Add(-10*24*time.Hour+time.Duration(i)*time.Hour), time.Second), t0)
	}
	if st := s2.Stats(); st.Segments != 4 {
		t.Errorf("in-order starts over 10 days: %d segments, want 4", st.Segments)
	}
}
