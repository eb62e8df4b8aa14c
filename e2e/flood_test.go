package e2e

// The aggregator under floods of what a member with the mesh key (and one
// node's key) can send: invented members, claims of the aggregator role,
// maximal direct messages from one source address and from many.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/internal/testutil"
	craft "github.com/gracewatch/gracewatch/internal/testutil/rogue"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// memKB reads a field of /proc/PID/status in kB (VmRSS, VmHWM).
func memKB(t testing.TB, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &kb)
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// resetPeak resets the peak RSS (VmHWM) of pid to its current RSS.
func resetPeak(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}

// metric returns the value of the series whose line starts with prefix in
// the aggregator's /metrics.
func metric(t testing.TB, g *aggregator, prefix string) float64 {
	t.Helper()
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, prefix+" "); ok {
			var v float64
			fmt.Sscanf(rest, "%g", &v)
			return v
		}
	}
	t.Fatalf("no %s in /metrics", prefix)
	return 0
}

// flushAlives sends addr's member (the aggregator g) an alive message
// about a name no member takes, from r's socket, until g counts it refused
// as invalid_name: memberlist handles the alive messages of its packets on
// one goroutine in the order they came (those its queue had no room for
// are dropped), so every alive message r sent before has been handled, or
// dropped, by then. A marker dropped with the flood is sent again.
func flushAlives(t testing.TB, r *craft.Crafter, addr string, g *aggregator) {
	t.Helper()
	const refused = `gracewatch_mesh_refused_total{reason="invalid_name"}`
	before := metric(t, g, refused)
	marker := craft.Alive("after the flood!", "127.3.0.1:7946", 1, nil)
	testutil.Eventually(t, 60*time.Second, "the aggregator to refuse the alive message sent after the flood", func() bool {
		if err := r.Send(addr, marker); err != nil {
			t.Fatal(err)
		}
		return metric(t, g, refused) > before
	})
}

// The aggregator's memory under what a member with the mesh key can send
// at most: 5,000 claims of the aggregator role, 55,000 invented members,
// 40 maximal direct messages at once. Each stays within its stated bound
// (packaging/README.md, "Node restriction").
func TestMeshFloodBounded(t *testing.T) {
	c := newCluster(t)
	agg := c.addAggregator("agg-1")
	aggAddr := c.seeds[0]
	c.addAgent("n1")
	agg.waitNode(t, "n1", "up", 15*time.Second, func(n node) bool { return n.State == "up" })
	pid := agg.cmd.Process.Pid
	r := c.crafter(t)
	rm := c.joinRogue(t, "rogue", encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT}, nil))

	t.Run("5,000 claims of the aggregator role", func(t *testing.T) {
		mark := len(agg.logs.String())
		meta := encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGGREGATOR}, nil)
		for i := 0; i < 5000; i += 100 {
			var msgs [][]byte
			for j := i; j < i+100; j++ {
				msgs = append(msgs, craft.Alive(fmt.Sprintf("claim%04d", j), fmt.Sprintf("127.2.%d.%d:7946", j/250, 1+j%250), 1, meta))
			}
			if err := r.Send(aggAddr, craft.Compound(msgs...)); err != nil {
				t.Fatal(err)
			}
		}
		flushAlives(t, r, aggAddr, agg)
		logs := agg.logs.String()[mark:]
		if !strings.Contains(logs, `"reason":"aggregator_meta"`) {
			t.Error("the claims are not refused as aggregator_meta")
		}
		lines := strings.Count(logs, "claim")
		t.Logf("5,000 unsigned claims of the aggregator role: %d log lines", lines)
		if lines > 80 {
			t.Errorf("%d log lines about the claims, want a bounded few", lines)
		}
		if l := leaderOf(t, agg); l != "agg-1" {
			t.Errorf("leader %q", l)
		}
	})

	t.Run("55,000 invented members", func(t *testing.T) {
		before := memKB(t, pid, "VmRSS")
		meta := encodeMeta(t, &gwpb.Meta{Role: gwpb.Role_ROLE_AGENT, State: gwpb.State_STATE_UP}, nil)
		const total = 55000
		for i := 0; i < total; i += 100 {
			var msgs [][]byte
			for j := i; j < i+100; j++ {
				msgs = append(msgs, craft.Alive(fmt.Sprintf("invented%05d", j), fmt.Sprintf("127.1.%d.%d:7946", j/250%250, 1+j%250), 1, meta))
			}
			if err := r.Send(aggAddr, craft.Compound(msgs...)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond) // not a wait: the flood's pacing, within the sockets' buffers
		}
		flushAlives(t, r, aggAddr, agg)
		members := metric(t, agg, "gracewatch_mesh_members")
		full := metric(t, agg, `gracewatch_mesh_refused_total{reason="table_full"}`)
		after := memKB(t, pid, "VmRSS")
		t.Logf("55,000 invented names: %.0f members kept (bound %d), %.0f refused as table_full; RSS %d -> %d MB",
			members, mesh.DefaultMaxMembers, full, before/1024, after/1024)
		if members > mesh.DefaultMaxMembers || full == 0 {
			t.Errorf("%.0f members kept, %.0f refused: want at most %d kept", members, full, mesh.DefaultMaxMembers)
		}
		if grew := (after - before) / 1024; grew > floodRSSBoundMB {
			t.Errorf("RSS grew by %d MB, bound %d MB", grew, floodRSSBoundMB)
		}
	})

	t.Run("40 maximal messages at once", func(t *testing.T) {
		resetPeak(t, pid)
		before := memKB(t, pid, "VmHWM")
		reason := incompressible(t, mesh.EnvelopeLimit-1024)
		env := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
			Meta: &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 1, State: gwpb.State_STATE_DOWN}, Reason: reason}}}
		b := c.sealAs(t, "rogue", time.Now(), env)
		var wg sync.WaitGroup
		for range 40 {
			wg.Go(func() {
				ap := netip.MustParseAddrPort(aggAddr)
				rm.ml.SendReliable(&memberlist.Node{Name: "agg-1", Addr: ap.Addr().AsSlice(), Port: ap.Port()}, b)
			})
		}
		wg.Wait()
		// Every byte of the 40 is written; a later message of the rogue's,
		// sent until the aggregator serves it (a stream past the peer's
		// bound is closed unread), has gone through the same reading,
		// decoding and intake.
		after := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
			Meta: &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: 2, State: gwpb.State_STATE_DOWN, Reason: "after the 40"}, Reason: "after the 40"}}}
		ap := netip.MustParseAddrPort(aggAddr)
		testutil.Eventually(t, 60*time.Second, "the aggregator to serve the rogue's message sent after the 40", func() bool {
			rm.ml.SendReliable(&memberlist.Node{Name: "agg-1", Addr: ap.Addr().AsSlice(), Port: ap.Port()}, c.sealAs(t, "rogue", time.Now(), after))
			n, ok := agg.node(t, "rogue")
			return ok && strings.Contains(n.Reason, "after the 40")
		})
		peak := memKB(t, pid, "VmHWM")
		t.Logf("40 messages of %.1f MB at once from one peer: peak RSS %d -> %d MB", float64(len(b))/1e6, before/1024, peak/1024)
		if grew := (peak - before) / 1024; grew > maxMessagesRSSBoundMB {
			t.Errorf("peak RSS grew by %d MB, bound %d MB", grew, maxMessagesRSSBoundMB)
		}
		agg.waitNode(t, "n1", "up", 5*time.Second, func(n node) bool { return n.State == "up" })
	})

	// Random text is as long on the wire as in memory; one repeated
	// letter is a few KB on the wire once memberlist compressed it, and
	// counts at what it expands to (mesh/streamcheck.go).
	// The random text is sent uncompressed (compressing 1.2 GB of it
	// under the race detector took the test two minutes, for nothing).
	for i, text := range []struct {
		name     string
		make     func(n int) string
		compress bool
	}{
		{"random text", func(n int) string { return incompressible(t, n) }, false},
		{"one repeated letter", func(n int) string { return strings.Repeat("x", n) }, true},
	} {
		t.Run("maximal messages of "+text.name+" from 30 source addresses at once", func(t *testing.T) {
			floodFromManySources(t, c, agg, aggAddr, pid, i, text.make, text.compress)
		})
	}
}

// floodFromManySources floods the aggregator with maximal messages of text from 30
// source addresses of its own (127.0.77.(1+30 run)...), 10 each at once, and checks
// that its peak RSS stays within manySourcesRSSBoundMB and that a small
// message sent after them is served.
func floodFromManySources(t *testing.T, c *cluster, agg *aggregator, aggAddr string, pid int, run int, text func(n int) string, compress bool) {
	// Root on "rogue" adds addresses to its interface: 30 of them,
	// 10 maximal messages each at once (2 past each one's bound).
	const sources, each = 30, 10
	var from []net.IP
	for i := range sources {
		from = append(from, net.IPv4(127, 0, 77, byte(1+30*run+i)))
	}
	many := c.rogueFrom(t, from, compress)
	resetPeak(t, pid)
	before := memKB(t, pid, "VmHWM")
	refusedBefore := metric(t, agg, `gracewatch_mesh_refused_total{reason="stream_bytes"}`) +
		metric(t, agg, `gracewatch_mesh_refused_total{reason="streams_per_peer"}`)
	reason := text(mesh.EnvelopeLimit - 1024)
	b := c.sealAs(t, "rogue", time.Now(), &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
		Meta: &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: uint64(3 + 2*run), State: gwpb.State_STATE_DOWN}, Reason: reason}}})
	ap := netip.MustParseAddrPort(aggAddr)
	var wg sync.WaitGroup
	for range sources * each {
		wg.Go(func() {
			many.SendReliable(&memberlist.Node{Name: "agg-1", Addr: ap.Addr().AsSlice(), Port: ap.Port()}, b)
		})
	}
	wg.Wait()
	// Every stream has been handled or refused (each send returned
	// once the aggregator closed its stream); one more message of
	// the rogue's, small, from one of the addresses, is served: the
	// small messages pass whatever the big ones hold.
	mark := fmt.Sprintf("after the 300 of run %d", run)
	after := &gwpb.Envelope{Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{
		Meta: &gwpb.Meta{Schema: 1, Role: gwpb.Role_ROLE_AGENT, Incarnation: 1, Seq: uint64(4 + 2*run), State: gwpb.State_STATE_DOWN, Reason: mark}, Reason: mark}}}
	testutil.Eventually(t, 60*time.Second, "the aggregator to serve the rogue's message sent after the 300", func() bool {
		many.SendReliable(&memberlist.Node{Name: "agg-1", Addr: ap.Addr().AsSlice(), Port: ap.Port()}, c.sealAs(t, "rogue", time.Now(), after))
		n, ok := agg.node(t, "rogue")
		return ok && strings.Contains(n.Reason, mark)
	})
	peak := memKB(t, pid, "VmHWM")
	refused := metric(t, agg, `gracewatch_mesh_refused_total{reason="stream_bytes"}`) +
		metric(t, agg, `gracewatch_mesh_refused_total{reason="streams_per_peer"}`) - refusedBefore
	t.Logf("%d messages of %.1f MB at once from %d source addresses: peak RSS %d -> %d MB, %.0f streams refused",
		sources*each, float64(len(b))/1e6, sources, before/1024, peak/1024, refused)
	if grew := (peak - before) / 1024; grew > manySourcesRSSBoundMB {
		t.Errorf("peak RSS grew by %d MB, bound %d MB", grew, manySourcesRSSBoundMB)
	}
	agg.waitNode(t, "n1", "up", 5*time.Second, func(n node) bool { return n.State == "up" })
}

// rogueFrom is a memberlist of the rogue's (the mesh key, not joined)
// whose streams come from the addresses from, in turn: root on a node can
// add addresses to its interface.
func (c *cluster) rogueFrom(t *testing.T, from []net.IP, compress bool) *memberlist.Memberlist {
	t.Helper()
	kr, err := mesh.LoadKeyring(c.keyfile)
	if err != nil {
		t.Fatal(err)
	}
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort, mc.AdvertisePort = "rogue-many", "127.0.0.1", 0, 0
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"},
		Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		t.Fatal(err)
	}
	mc.Transport = &manySources{handledStreams: handledStreams{nt}, from: from}
	mc.Label, mc.Keyring, mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = c.label, kr, true, true
	mc.EnableCompression = compress
	mc.LogOutput = io.Discard
	ml, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ml.Shutdown() })
	return ml
}

// manySources dials each stream from the next of its addresses.
type manySources struct {
	handledStreams
	from []net.IP
	next atomic.Uint64
}

func (m *manySources) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	ip := m.from[int(m.next.Add(1))%len(m.from)]
	c, err := (&net.Dialer{Timeout: timeout, LocalAddr: &net.TCPAddr{IP: ip}}).Dial("tcp", a.Addr)
	if err != nil {
		return nil, err
	}
	return closeAfterPeer{c}, nil
}

func (m *manySources) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return m.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// incompressible is n bytes of text that memberlist's compression (LZW,
// on by default, inside the encryption) does not shrink much: random
// bytes in base64, as long on the wire as in memory.
func incompressible(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n*3/4+3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// The bounds TestMeshFloodBounded holds the aggregator to (packaging/
// README.md states them): a full member table, and the maximal messages
// one peer address can have read at once (maxStreamsPerPeer of them).
const (
	floodRSSBoundMB = 64
	// maxMessagesRSSBoundMB: the streams open at once hold 16 MiB past
	// their free bytes (mesh/transport.go), which memberlist and the
	// decoding copy about five times (its buffer's growth, the
	// decryption, the user message, the decoded reason): about 80 MB
	// live, and the collector lets the heap reach twice what is live.
	// Measured +81 to +100 MB over four runs of random text.
	maxMessagesRSSBoundMB = 192
	// manySourcesRSSBoundMB: maximal messages from many source addresses
	// are held to the same byte bound of all peers (mesh/transport.go),
	// counted at what they expand to (mesh/streamcheck.go), and each is
	// bounded before it waits in the aggregator's inbox
	// (aggregator/intake.go HandleMessage): the same bound as one peer's.
	// Measured: random text +2 to +50 MB, one repeated letter (a few KB
	// each on the wire) +16 to +53 MB; 2,275 MB before any bound, +1,096 MB
	// without the byte bound, +860 MB for the repeated letter with the
	// byte bound counting only the wire.
	manySourcesRSSBoundMB = maxMessagesRSSBoundMB
)
