package benchenv

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// StartPaced starts the members from to n-1 with start, in parallel
// batches of batch: a batch of k members joining a cluster of m gets
// k·max(m,100)/load seconds, and each member starts after a random delay
// within that time, so that the joins' gossip is spread out. start is given
// the member's index and the first index of its batch (members below it are
// running: a join may pick its seed among them). StartPaced logs a line
// each 100 members (the time since it began and the cores used since the
// last line) and fails b if a start fails. It returns when the last batch's
// time is over.
func StartPaced(b testing.TB, from, n, batch, load int, start func(i, lo int) error) {
	b.Helper()
	begin := time.Now()
	lastAt, lastCPU := begin, CPUTime()
	for lo := from; lo < n; lo += batch {
		hi := min(lo+batch, n)
		span := time.Duration(float64(hi-lo) * float64(max(lo, 100)) / float64(load) * float64(time.Second))
		batchEnd := time.Now().Add(span)
		errs := make([]error, hi-lo)
		var wg sync.WaitGroup
		for i := lo; i < hi; i++ {
			wg.Go(func() {
				time.Sleep(rand.N(span + 1)) // not a wait: pacing, each member starts at a random time within its batch's span
				errs[i-lo] = start(i, lo)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			b.Fatalf("starting the members: %v", err)
		}
		time.Sleep(time.Until(batchEnd)) // not a wait: pacing, the next batch starts when this one's span is over
		if hi/100 != lo/100 || hi == n {
			now, cpu := time.Now(), CPUTime()
			b.Logf("%d members started after %v (%.2f cores since the last line)", hi, now.Sub(begin).Round(time.Millisecond),
				(cpu-lastCPU).Seconds()/now.Sub(lastAt).Seconds())
			lastAt, lastCPU = now, cpu
		}
	}
}

// Each runs f(i) for every i from 0 to n-1, at most limit of them at once,
// and returns once all have returned. The benchmarks start and shut down
// their hundreds of members this way, a bounded number at a time.
func Each(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}
