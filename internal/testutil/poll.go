package testutil

import (
	"testing"
	"time"
)

// Poll calls cond until it returns true or timeout has passed, and reports
// whether it did. It waits 1 ms after the first call, then twice as long
// after each call up to 50 ms, so that a condition that holds soon is seen
// soon and one that takes seconds costs little CPU. cond is called once
// more after the deadline, so that a slow machine that descheduled the
// poller past it does not fail a condition that holds. cond runs on the
// calling goroutine.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
		wait = min(2*wait, 50*time.Millisecond)
	}
	return true
}

// Eventually is Poll that fails the test (t.Fatalf, so call it from the
// test goroutine) when cond has not held within timeout, naming what it
// waited for. It returns how long cond took to hold.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
	return time.Since(start)
}

// PollRead is Poll of a read: it calls read (as Poll calls cond) until read
// returns no error and a value cond accepts. It returns the last value and
// error read, and whether cond held, so that the caller's failure can say
// what was seen last.
func PollRead[T any](timeout time.Duration, read func() (T, error), cond func(T) bool) (last T, err error, ok bool) {
	ok = Poll(timeout, func() bool {
		last, err = read()
		return err == nil && cond(last)
	})
	return last, err, ok
}
