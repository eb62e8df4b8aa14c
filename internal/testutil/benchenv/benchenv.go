// Package benchenv holds what gracewatch's long benchmarks share: their
// settings from the environment (GW_BENCH_*), the machine's load beside
// their figures, and percentiles.
package benchenv

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shirou/gopsutil/v4/load"
)

// Ints reads a comma-separated list of non-negative integers from the
// environment variable name, or returns def; a bad value fails b.
func Ints(b testing.TB, name string, def []int) []int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("%s=%q: want non-negative integers separated by commas", name, v)
		}
		out = append(out, n)
	}
	return out
}

// Int reads a positive integer from the environment variable name, or
// returns def; a bad value fails b.
func Int(b testing.TB, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// Duration reads a duration from the environment variable name, or
// returns def; a bad value fails b.
func Duration(b testing.TB, name string, def time.Duration) time.Duration {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.Fatalf("%s=%q: want a duration such as 30s", name, v)
	}
	return d
}

// LoadAvg is the 1, 5 and 15 minute load averages, through gopsutil as
// the programs read them: other work on the machine skews the figures.
func LoadAvg() string {
	avg, err := load.Avg()
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", avg.Load1, avg.Load5, avg.Load15)
}

// CPUTime is the CPU time (user and system) this process has used.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Percentile returns the p-th percentile of sorted (nearest rank); 0 for
// an empty slice.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Median returns the median of xs, which it sorts: the middle value, or the
// mean of the two middle ones when len(xs) is even (of two samples a side,
// neither alone is the median); 0 for an empty slice.
func Median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
