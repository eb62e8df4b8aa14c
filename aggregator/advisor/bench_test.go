package advisor

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/aggregator/history"
)

// BenchmarkHistory10M is issue 17's test 3: it writes GW_BENCH_TEARDOWNS
// (default 10,000,000) teardowns of 10,000 nodes over 90 days into a store
// bounded at 1 GiB, then reports the bytes on disk, the heap the store
// holds, and the time of one advisor answer over all of them (two scans).
// Run: go test -run '^$' -bench History10M -benchtime 1x ./aggregator/advisor/
func BenchmarkHistory10M(b *testing.B) {
	n := 10_000_000
	if v := os.Getenv("GW_BENCH_TEARDOWNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	dir := b.TempDir()
	now := time.Date(2025, 9, 1, 0, 0, 0, 0, time.UTC)
	start := now.Add(-89 * 24 * time.Hour)
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	st, err := history.Open(history.Options{Dir: dir, NodeRate: 1e9, NodeBurst: 1 << 30}, now)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	users := []string{"alice", "bob", "carol", "dave", "erin"}
	cmds := []string{"epilog", "lfs", "sync", "umount", "cat"}
	step := (89 * 24 * time.Hour) / time.Duration(n)
	t0 := time.Now()
	for i := range n {
		s := start.Add(time.Duration(i) * step)
		d := time.Duration(1+i%97) * time.Second
		o := history.OutcomeClean
		if i%10007 == 0 {
			d, o = 400*time.Second, history.OutcomeHung
		}
		r := history.Record{Node: fmt.Sprintf("node%05d", i%10000), Job: strconv.AppendInt(nil, int64(1_000_000+i), 10),
			User: users[i%5], Command: cmds[i%5], StartMs: s.UnixMilli(), ReleasedMs: s.Add(d).UnixMilli(), GraceMs: 120000, Outcome: o}
		if why := st.Add(r, now); why != "" {
			b.Fatalf("record %d: %s", i, why)
		}
		if i%4096 == 0 {
			st.Flush(now)
		}
	}
	st.Flush(now)
	write := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	var disk int64
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		fi, _ := os.Stat(f)
		disk += fi.Size()
	}
	stats := st.Stats()
	b.ResetTimer()
	for range b.N {
		a, err := Advise(Query{FromMs: start.UnixMilli(), ToMs: now.UnixMilli(), NowMs: now.UnixMilli(), InForce: 120 * time.Second}, st.Scan, nil,
			[]Floor{{Node: "node00001", Ms: 95000, Path: "slurm"}})
		if err != nil {
			b.Fatal(err)
		}
		if a.Records != int(stats.Records) {
			b.Fatalf("advised over %d of %d", a.Records, stats.Records)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "advise-s")
	b.ReportMetric(float64(disk), "disk-bytes")
	b.ReportMetric(float64(disk)/float64(stats.Records), "bytes/record")
	b.ReportMetric(float64(after.HeapAlloc)-float64(before.HeapAlloc), "store-heap-bytes")
	b.ReportMetric(write.Seconds(), "write-s")
	b.ReportMetric(float64(stats.Records), "records")

	if disk > history.DefaultMaxBytes {
		b.Errorf("%d bytes on disk, over the bound %d", disk, history.DefaultMaxBytes)
	}
}
