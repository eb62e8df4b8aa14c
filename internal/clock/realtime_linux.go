package clock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// At calls f in its own goroutine once the wall clock reads t or later,
// through a CLOCK_REALTIME timerfd armed at the absolute instant t: the
// kernel fires it when the wall clock reaches t, whether that clock was
// stepped back or forward meanwhile (NTP, date(1)), and nothing wakes
// before. The goroutine waits in Go's poller: an idle timer makes no
// system call. It fails only when no timerfd can be made (At of the
// package then falls back to rechecking every WallRecheck).
func (Real) At(t time.Time, f func()) (Timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_REALTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	ns := t.Round(0).UnixNano()
	if ns <= 0 {
		ns = 1 // a zero it_value would disarm the timer: fire at once
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(ns)}
	if err := unix.TimerfdSettime(fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("timerfd settime: %w", err)
	}
	rt := &realtimeTimer{file: os.NewFile(uintptr(fd), "timerfd")}
	go rt.wait(f)
	return rt, nil
}

type realtimeTimer struct {
	file *os.File
	mu   sync.Mutex
	done bool // fired or stopped
}

func (r *realtimeTimer) wait(f func()) {
	var buf [8]byte
	for {
		_, err := r.file.Read(buf[:])
		if err == nil && binary.NativeEndian.Uint64(buf[:]) > 0 {
			break
		}
		if errors.Is(err, os.ErrClosed) {
			return // stopped
		}
		if err != nil && !errors.Is(err, unix.EINTR) && !errors.Is(err, unix.EAGAIN) {
			// Cannot happen for a valid timerfd; never lose the
			// callback: fire.
			break
		}
	}
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	r.done = true
	r.mu.Unlock()
	r.file.Close()
	f()
}

// Stop prevents the callback from running; it reports whether it did.
func (r *realtimeTimer) Stop() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	r.done = true
	r.file.Close()
	return true
}
