package mesh

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"sync"
	"time"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: msg") into
// slog records at the matching level. memberlist writes each line with one
// Write call (log.Logger guarantees it).
type slogWriter struct{ log *slog.Logger }

// newStdLogger returns the *log.Logger memberlist's Config.Logger wants,
// writing into l.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{l}, "", 0)
}

func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimRight(p, "\r\n")
	level := slog.LevelInfo
	if rest, ok := bytes.CutPrefix(line, []byte("[")); ok {
		if tag, msg, ok := bytes.Cut(rest, []byte("] ")); ok {
			if lv, known := memberlistLevel(string(tag)); known {
				level, line = lv, msg
			}
		}
	}
	line, _ = bytes.CutPrefix(line, []byte("memberlist: "))
	w.log.Log(context.Background(), level, string(line), "lib", "memberlist")
	return len(p), nil
}

func memberlistLevel(tag string) (slog.Level, bool) {
	switch tag {
	case "DEBUG", "TRACE":
		return slog.LevelDebug, true
	case "INFO":
		return slog.LevelInfo, true
	case "WARN", "WARNING":
		return slog.LevelWarn, true
	case "ERR", "ERROR":
		return slog.LevelError, true
	}
	return 0, false
}

// limiter allows one event per key per interval and counts the rest, with
// a bounded number of keys (a flood of distinct keys resets it rather than
// growing it).
type limiter struct {
	every time.Duration
	mu    sync.Mutex
	seen  map[string]*limitEntry
}

type limitEntry struct {
	last       time.Time
	suppressed int
}

const limiterKeys = 1024

// allow reports whether an event for key may be logged now, and how many
// were suppressed since the last one that was.
func (l *limiter) allow(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil || len(l.seen) >= limiterKeys {
		l.seen = make(map[string]*limitEntry)
	}
	e := l.seen[key]
	if e == nil {
		l.seen[key] = &limitEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.every {
		e.suppressed++
		return false, 0
	}
	n := e.suppressed
	e.last, e.suppressed = now, 0
	return true, n
}
