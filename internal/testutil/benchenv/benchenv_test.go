package benchenv

import (
	"sync"
	"testing"
	"time"
)

func TestSettings(t *testing.T) {
	t.Setenv("GW_TEST_INTS", "100, 400,1000")
	if got := Ints(t, "GW_TEST_INTS", nil); len(got) != 3 || got[0] != 100 || got[2] != 1000 {
		t.Fatalf("Ints = %v", got)
	}
	if got := Ints(t, "GW_TEST_UNSET", []int{7}); len(got) != 1 || got[0] != 7 {
		t.Fatalf("Ints default = %v", got)
	}
	t.Setenv("GW_TEST_DUR", "90s")
	if got := Duration(t, "GW_TEST_DUR", time.Second); got != 90*time.Second {
		t.Fatalf("Duration = %v", got)
	}
	if got := Duration(t, "GW_TEST_UNSET", time.Second); got != time.Second {
		t.Fatalf("Duration default = %v", got)
	}
	t.Setenv("GW_TEST_FLOATS", "0.05, 60")
	if got := Floats(t, "GW_TEST_FLOATS", nil); len(got) != 2 || got[0] != 0.05 || got[1] != 60 {
		t.Fatalf("Floats = %v", got)
	}
	for _, bad := range []string{"-1", "1e7", "x", "1,,2"} {
		t.Setenv("GW_TEST_FLOATS", bad)
		r := &recorder{TB: t}
		Floats(r, "GW_TEST_FLOATS", nil)
		if !r.failed {
			t.Errorf("Floats of %q did not fail", bad)
		}
	}
	// One value where one is read: a list fails rather than run its first.
	t.Setenv("GW_TEST_ONE", "7")
	if got := NonNegInt(t, "GW_TEST_ONE", 3); got != 7 {
		t.Fatalf("NonNegInt = %v", got)
	}
	if got := Float(t, "GW_TEST_ONE", 3); got != 7 {
		t.Fatalf("Float = %v", got)
	}
	t.Setenv("GW_TEST_ONE", "0")
	if got := NonNegInt(t, "GW_TEST_ONE", 3); got != 0 {
		t.Fatalf("NonNegInt of 0 = %v", got)
	}
	for _, bad := range []string{"1,2", "-1", "x"} {
		t.Setenv("GW_TEST_ONE", bad)
		r := &recorder{TB: t}
		NonNegInt(r, "GW_TEST_ONE", 0)
		f := &recorder{TB: t}
		Float(f, "GW_TEST_ONE", 0)
		if !r.failed || !f.failed {
			t.Errorf("%q: NonNegInt failed %v, Float failed %v; want both", bad, r.failed, f.failed)
		}
	}
	t.Setenv("GW_TEST_INT", " 5")
	if got := Int(t, "GW_TEST_INT", 3); got != 5 {
		t.Fatalf("Int = %v", got)
	}
	if got := Int(t, "GW_TEST_UNSET", 3); got != 3 {
		t.Fatalf("Int default = %v", got)
	}
	for _, bad := range []string{"0", "-2", "five", "5s"} {
		t.Setenv("GW_TEST_INT", bad)
		r := &recorder{TB: t}
		Int(r, "GW_TEST_INT", 3)
		if !r.failed {
			t.Errorf("Int of %q did not fail", bad)
		}
	}
}

// recorder is a testing.TB whose Fatalf only records the failure.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 20; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 10 * time.Millisecond}, {99, 20 * time.Millisecond}, {0, time.Millisecond}, {100, 20 * time.Millisecond}} {
		if got := Percentile(d, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("empty: want 0")
	}
	if LoadAvg() == "" || CPUTime() <= 0 {
		t.Error("LoadAvg or CPUTime empty")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		name string
		in   []time.Duration
		want time.Duration
	}{
		{"empty", nil, 0},
		{"odd", []time.Duration{5, 1, 3}, 3},
		{"two a side: the mean of the middle two, not the larger", []time.Duration{400, 300}, 350},
		{"even", []time.Duration{4, 1, 3, 2}, 2},
	} {
		if got := Median(c.in); got != c.want {
			t.Errorf("%s: Median = %v, want %v", c.name, got, c.want)
		}
	}
	if got := Median([]float64{1.0, 1.5}); got != 1.25 {
		t.Errorf("Median of ratios = %v, want 1.25", got)
	}
}

func TestEach(t *testing.T) {
	var mu sync.Mutex
	running, most, seen := 0, 0, make([]bool, 50)
	started, release := make(chan struct{}, len(seen)), make(chan struct{})
	go func() {
		// Let the first three run together before any may end.
		for range 3 {
			<-started
		}
		close(release)
	}()
	Each(len(seen), 3, func(i int) {
		mu.Lock()
		running++
		most = max(most, running)
		seen[i] = true
		mu.Unlock()
		started <- struct{}{}
		<-release
		mu.Lock()
		running--
		mu.Unlock()
	})
	if most != 3 {
		t.Errorf("at most %d ran at once, want 3", most)
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("f(%d) not run", i)
		}
	}
}
