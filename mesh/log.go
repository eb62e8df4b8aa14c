package mesh

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"runtime"
	"slices"
	"time"

	"github.com/gracewatch/gracewatch/internal/ratelog"
)

// slogWriter turns memberlist's log lines ("[WARN] memberlist: msg") into
// slog records at the matching level. memberlist writes each line with one
// Write call (log.Logger guarantees it). Its lines are rate limited per
// kind of line: anyone who reaches the port can make memberlist log a
// warning per packet (junk, a wrong key, a wrong label), and anyone with
// the mesh key an info line per packet (a node's address updated after its
// forged death). Its debug lines are not limited: they are its trace of
// every connection and exchange, what an operator sets log_level =
// "debug" for, for a while, and useless when sampled.
type slogWriter struct {
	log   *slog.Logger
	limit *ratelog.Limiter
}

// memberlistLogEvery rate-limits each kind of memberlist line (info and
// above).
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
	if !w.log.Enabled(context.Background(), level) {
		return len(p), nil // costs no limiter's burst
	}
	if level >= slog.LevelInfo && w.limit != nil {
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

// The bound of the lines about one member: its departures and returns, an
// aggregator lost and found by gossip. Anyone with the mesh key can make
// memberlist call a member dead, and the member refute it, as often as
// packets go; a member that leaves and joins again can do so itself.
const (
	memberLogLines = 10
	memberLogEvery = time.Minute
)

// memberLine logs msg about member name, within its budget of
// memberLogLines per memberLogEvery: past it, lines are counted
// (gracewatch_mesh_log_lines_suppressed_total) and their number is
// reported, as "suppressed", with the member's next line. A level the
// logger does not write costs no budget. Safe for concurrent use.
func (m *Mesh) memberLine(level slog.Level, name, msg string, args ...any) {
	ctx := context.Background()
	if !m.log.Enabled(ctx, level) {
		return
	}
	ok, n := true, 0
	if m.memberLines != nil { // nil: a Mesh not made by New (tests)
		ok, n = m.memberLines.Allow(name, m.now())
	}
	if !ok {
		m.linesHeld.Add(1)
		return
	}
	if n > 0 {
		args = append(slices.Clip(args), "suppressed", n)
	}
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:]) // the caller's line, as if it had logged itself
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	_ = m.log.Handler().Handle(ctx, r)
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
