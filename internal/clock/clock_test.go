package clock

import (
	"testing"
	"time"
)

func TestFakeRunsTimersInOrder(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	var got []int
	f.AfterFunc(3*time.Second, func() { got = append(got, 3) })
	f.AfterFunc(1*time.Second, func() {
		got = append(got, 1)
		f.AfterFunc(time.Second, func() { got = append(got, 2) })
	})
	stopped := f.AfterFunc(2500*time.Millisecond, func() { got = append(got, 99) })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	f.Advance(2 * time.Second)
	if len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("after 2s got %v, want [1 2]", got)
	}
	f.Advance(time.Second)
	if len(got) != 3 || got[2] != 3 {
		t.Fatalf("after 3s got %v, want [1 2 3]", got)
	}
	if f.Now() != time.Unix(1003, 0) {
		t.Fatalf("now = %v", f.Now())
	}
	if f.Pending() != 0 {
		t.Fatalf("pending = %d", f.Pending())
	}
}
