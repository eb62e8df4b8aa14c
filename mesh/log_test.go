package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/internal/testutil/rogue"
)

// capture is a slog.Handler that keeps records.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r)
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func TestMemberlistLogLevels(t *testing.T) {
	c := &capture{}
	l := newStdLogger(slog.New(c))
	cases := []struct {
		line  string
		level slog.Level
		msg   string
	}{
		{"[DEBUG] memberlist: Stream connection from=127.0.0.1:5000", slog.LevelDebug, "Stream connection from=127.0.0.1:5000"},
		{"[INFO] memberlist: Suspect node-3 has failed", slog.LevelInfo, "Suspect node-3 has failed"},
		{"[WARN] memberlist: Refuting a dead message", slog.LevelWarn, "Refuting a dead message"},
		{"[ERR] memberlist: Conflicting address for node-1", slog.LevelError, "Conflicting address for node-1"},
		{"[ERROR] memberlist: x", slog.LevelError, "x"},
		{"no level here", slog.LevelInfo, "no level here"},
		{"[ODD] memberlist: y", slog.LevelInfo, "[ODD] memberlist: y"},
	}
	for _, tc := range cases {
		l.Print(tc.line)
	}
	if len(c.recs) != len(cases) {
		t.Fatalf("%d records for %d lines", len(c.recs), len(cases))
	}
	for i, tc := range cases {
		r := c.recs[i]
		if r.Level != tc.level || r.Message != tc.msg {
			t.Errorf("%q -> %v %q, want %v %q", tc.line, r.Level, r.Message, tc.level, tc.msg)
		}
	}
}

// Junk packets to the mesh port (anyone who reaches it can send them) make
// a bounded number of log lines: memberlist logs one per packet.
func TestJunkPacketsLogBounded(t *testing.T) {
	t.Parallel()
	key := keyFile(t)
	n := start(t, "agg-1", aggr, func(o *Options) {
		o.Config.Insecure = false
		o.Config.Keyring = key
	})
	conn, err := net.Dial("udp", n.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tcp := 0
	sent := 0
	for end := time.Now().Add(time.Second); time.Now().Before(end); sent++ {
		junk := fmt.Appendf(nil, "junk %d from=10.0.0.%d", sent, sent%250)
		conn.Write(junk)
		if sent%50 == 0 && tcp < 20 { // and some junk streams
			if c, err := net.DialTimeout("tcp", n.Addr(), time.Second); err == nil {
				c.Write(junk)
				c.Close()
				tcp++
			}
		}
		if sent%10 == 0 {
			time.Sleep(time.Millisecond) // not a wait: pacing the junk, about 10,000 packets a second at most
		}
	}
	// A genuine packet after the junk: once the mesh has it, it has
	// handled (and logged) every junk packet before it.
	kr, err := LoadKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	r, err := rogue.New(testConfig().Label, kr.GetPrimaryKey())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	packetMarker(t, r, n, "after the junk")
	var warnings int
	for _, line := range strings.Split(n.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			warnings++
		}
	}
	t.Logf("%d junk packets (%d streams): %d warning and error lines", sent, tcp, warnings)
	if sent < 200 {
		t.Fatalf("only %d packets sent", sent)
	}
	if warnings == 0 || warnings > 2*ratelog.Burst {
		t.Errorf("%d warning/error lines for %d junk packets, want 1..%d", warnings, sent, 2*ratelog.Burst)
	}
}

// A member that flaps (anyone with the mesh key can have memberlist call it
// dead, and it refutes) makes at most memberLogLines lines a minute about
// it; the rest are counted and reported with its next line.
func TestMemberFlapLogBounded(t *testing.T) {
	var mu sync.Mutex
	now := time.Now() // the mesh's clock, stopped: moved on by the test only
	n := start(t, "agg-1", aggr, func(o *Options) {
		o.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	node := &memberlist.Node{Name: "node-1", Addr: net.IPv4(127, 0, 0, 9), Port: 7946}
	const flaps = 1000
	for range flaps {
		n.observe(node, eventLeave)
		n.observe(node, eventJoin)
	}
	lines := func() (count, suppressed int) {
		for _, line := range strings.Split(n.logs.String(), "\n") {
			if strings.Contains(line, "node=node-1") && (strings.Contains(line, `msg="member gone"`) || strings.Contains(line, `msg="member back"`)) {
				count++
				if _, s, ok := strings.Cut(line, " suppressed="); ok {
					k, _ := strconv.Atoi(strings.Fields(s)[0])
					suppressed += k
				}
			}
		}
		return count, suppressed
	}
	if c, _ := lines(); c != memberLogLines {
		t.Errorf("%d lines about a member that flapped %d times in a minute, want %d", c, flaps, memberLogLines)
	}
	held := n.linesHeld.Load()
	if held != 2*flaps-memberLogLines {
		t.Errorf("%d lines counted held back, want %d", held, 2*flaps-memberLogLines)
	}
	mu.Lock()
	now = now.Add(memberLogEvery)
	mu.Unlock()
	n.observe(node, eventLeave)
	if _, s := lines(); s != int(held) {
		t.Errorf("the next line reports %d suppressed, want %d", s, held)
	}
}

// memberlist's info lines are limited per kind as its warnings are (one per
// forged death of a member would otherwise be a line), its debug lines
// (its trace) are not, and a level the logger does not write takes nothing
// from the limiter's burst.
func TestMemberlistInfoLinesLimited(t *testing.T) {
	c := &capture{}
	l := newStdLogger(slog.New(c))
	for i := range 100 {
		l.Printf("[INFO] memberlist: Updating address for left or failed node node-%d from 10.0.0.%d:7946 to 10.0.1.%d:7946", i%7, i%250, i%250)
		l.Printf("[DEBUG] memberlist: Stream connection from=10.0.0.%d:%d", i%250, 40000+i)
	}
	if len(c.recs) != 101 {
		t.Errorf("%d records for 100 info lines of one kind and 100 debug lines, want 101", len(c.recs))
	}

	var buf strings.Builder
	warn := newStdLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})))
	kinds := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
		"nu", "xi", "omicron", "pi", "rho", "sigma", "tau", "upsilon", "phi", "chi", "psi", "omega"}
	for _, k := range kinds { // info lines the logger does not write
		warn.Printf("[INFO] memberlist: %s", k)
	}
	for _, k := range kinds[:ratelog.Burst] {
		warn.Printf("[WARN] memberlist: %s", k)
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != ratelog.Burst {
		t.Errorf("%d of %d warnings of distinct kinds written after unwritten info lines, want all", n, ratelog.Burst)
	}
}
