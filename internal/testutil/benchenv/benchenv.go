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

// setting reads the environment variable name with parse, or returns def
// when it is unset or empty; a value parse refuses fails b, which is told
// what is wanted.
func setting[T any](b testing.TB, name string, def T, want string, parse func(v string) (T, bool)) T {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	x, ok := parse(v)
	if !ok {
		b.Fatalf("%s=%q: want %s", name, v, want)
	}
	return x
}

// list parses v's comma-separated items with parse.
func list[T any](v string, parse func(item string) (T, bool)) ([]T, bool) {
	var out []T
	for _, f := range strings.Split(v, ",") {
		x, ok := parse(strings.TrimSpace(f))
		if !ok {
			return nil, false
		}
		out = append(out, x)
	}
	return out, true
}

// atLeast parses an integer of at least lo.
func atLeast(lo int) func(string) (int, bool) {
	return func(v string) (int, bool) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		return n, err == nil && n >= lo
	}
}

// Ints reads a comma-separated list of non-negative integers from the
// environment variable name, or returns def; a bad value fails b.
func Ints(b testing.TB, name string, def []int) []int {
	b.Helper()
	return setting(b, name, def, "non-negative integers separated by commas", func(v string) ([]int, bool) {
		return list(v, atLeast(0))
	})
}

// Floats reads a comma-separated list of non-negative numbers (at most
// 10⁶) from the environment variable name, or returns def; a bad value
// fails b.
func Floats(b testing.TB, name string, def []float64) []float64 {
	b.Helper()
	return setting(b, name, def, "non-negative numbers separated by commas", func(v string) ([]float64, bool) {
		return list(v, nonNegFloat)
	})
}

// NonNegInt reads one non-negative integer from the environment variable
// name, or returns def; a bad value, or a list, fails b (a list where one
// value is read would silently run only its first).
func NonNegInt(b testing.TB, name string, def int) int {
	b.Helper()
	return setting(b, name, def, "a non-negative integer", atLeast(0))
}

// Float reads one non-negative number (at most 10⁶) from the environment
// variable name, or returns def; a bad value, or a list, fails b.
func Float(b testing.TB, name string, def float64) float64 {
	b.Helper()
	return setting(b, name, def, "a non-negative number", nonNegFloat)
}

// nonNegFloat parses a number from 0 to 10⁶.
func nonNegFloat(v string) (float64, bool) {
	x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	return x, err == nil && x >= 0 && x <= 1e6
}

// Int reads a positive integer from the environment variable name, or
// returns def; a bad value fails b.
func Int(b testing.TB, name string, def int) int {
	b.Helper()
	return setting(b, name, def, "a positive integer", atLeast(1))
}

// Duration reads a duration from the environment variable name, or
// returns def; a bad value fails b.
func Duration(b testing.TB, name string, def time.Duration) time.Duration {
	b.Helper()
	return setting(b, name, def, "a duration such as 30s", func(v string) (time.Duration, bool) {
		d, err := time.ParseDuration(v)
		return d, err == nil && d >= 0
	})
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
