package mesh

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"time"

	"github.com/gracewatch/gracewatch/internal/ratelog"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: msg") into
// slog records at the matching level. memberlist writes each line with one
// Write call (log.Logger guarantees it). Its warnings and errors are rate
// limited per kind of line: anyone who reaches the port can make memberlist
// log one per packet (junk, a wrong key, a wrong label).
type slogWriter struct {
	log   *slog.Logger
	limit *ratelog.Limiter
}

// memberlistLogEvery rate-limits each kind of memberlist warning or error.
const memberlistLogEvery = 10 * time.Second

// newStdLogger returns the *log.Logger memberlist's Config.Logger wants,
// writing into l.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(slogWriter{log: l, limit: ratelog.New(memberlistLogEvery)}, "", 0)
}

// lineKind is what a memberlist line is rate-limited by: its text up to
// the peer's address or the first digit (addresses, ports, sizes and
// counts vary between packets of one kind).
func lineKind(line []byte) string {
	if i := bytes.Index(line, []byte("from=")); i >= 0 {
		line = line[:i]
	}
	if i := bytes.IndexAny(line, "0123456789"); i >= 0 {
		line = line[:i]
	}
	return string(line[:min(len(line), 64)])
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
	if level >= slog.LevelWarn && w.limit != nil {
		ok, suppressed := w.limit.Allow(lineKind(line), time.Now())
		if !ok {
			return len(p), nil
		}
		if suppressed > 0 {
			w.log.Log(context.Background(), level, string(line), "lib", "memberlist", "suppressed", suppressed)
			return len(p), nil
		}
	}
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
