package httpapi

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// answerWithin is how soon a client from another host must be answered
// during a flood: a few seconds, far below the read timeout (15 s) and the
// idle timeout (2 min) that the flood's connections would hold their
// slots for.
const answerWithin = 5 * time.Second

// The kinds of flood.
const (
	// floodPartial: every connection sends a partial request, headers
	// without the announced body (a POST without a token, answered 401,
	// whose body net/http then waits for) or an incomplete header, in
	// turn.
	floodPartial = "partial requests"
	// floodIdle: every connection completes a request (GET /healthz) and
	// stays open, idle, as keep-alive.
	floodIdle = "idle keep-alive"
)

// flooder is 127.0.0.1 (an attacker on one compute node); the other
// client comes from 127.0.0.2 (the scheduler, Prometheus, an
// administrator).
var (
	flooder     = netip.MustParseAddr("127.0.0.1")
	otherSource = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
)

// flood opens n connections from 127.0.0.1 to addr, each of kind, and
// returns how many of them were answered (floodIdle only: the others were
// closed by the server). The connections stay open until the test ends,
// but for those found closed. It waits for nothing but each connection's
// own answer.
func flood(t *testing.T, addr, kind string, n int) (answered int) {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d of the flood: %v", i, err)
		}
		switch {
		case kind == floodIdle:
			c.SetDeadline(time.Now().Add(testTimeout))
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil { // closed at once by the server
				c.Close()
				continue
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("connection %d of the flood: /healthz answered %d", i, resp.StatusCode)
			}
			answered++
		case i%2 == 0:
			// A write error means the server closed it at once.
			fmt.Fprintf(c, "POST /v1/nodes/n1/drain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
		default:
			fmt.Fprintf(c, "GET /v1/nodes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ")
		}
		conns = append(conns, c)
	}
	return answered
}

// fromOtherSource returns a client whose connections come from 127.0.0.2,
// one per request.
func fromOtherSource(t *testing.T) *http.Client {
	d := &net.Dialer{LocalAddr: otherSource, Timeout: answerWithin}
	tr := &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: answerWithin}
}

// answered waits until the client from another source has GET /healthz
// and an authenticated GET /v1/nodes both answered 200, and returns how
// long that took; it fails the test past answerWithin.
func answered(t *testing.T, hc *http.Client, base string) time.Duration {
	t.Helper()
	get := func(path, token string) string {
		req, _ := http.NewRequest("GET", base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error()
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return fmt.Sprint(resp.StatusCode)
	}
	start := time.Now()
	last, _, ok := testutil.PollRead(answerWithin, func() (string, error) {
		return get("/healthz", "") + ", " + get("/v1/nodes", testReadToken), nil
	}, func(s string) bool { return s == "200, 200" })
	took := time.Since(start)
	if !ok {
		t.Fatalf("a client from %s was not answered within %v during the flood: last /healthz, /v1/nodes: %s", otherSource.IP, answerWithin, last)
	}
	return took
}

// closedBy returns gracewatch_aggregator_http_connections_closed_total
// by reason.
func closedBy(t *testing.T, reg *prometheus.Registry) map[string]int {
	t.Helper()
	out := map[string]int{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "gracewatch_aggregator_http_connections_closed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = int(m.GetCounter().GetValue())
		}
	}
	return out
}

// heldBy returns how many connections src holds, and the most held at
// once by all.
func (t *connTracker) heldBy(src netip.Addr) (held, peak int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.bySource[src], t.peak
}

// seen returns how many connections were accepted, admitted or closed at
// once.
func (t *connTracker) seen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.admitted + int(t.refused.Load())
}

// From ONE host, 1,100 connections (past MaxConns, 1,024) that send a
// partial request, or that complete one and stay idle: a client from
// another host still has /healthz and an authenticated /v1/nodes
// answered within a few seconds. With the default bounds the flood holds
// MaxConnsPerSource (64) slots; with the per-source bound lifted (as for a
// proxy, or an attacker on a few addresses each at the bound) it holds no
// more than the slots outside the reserve (896), and under pressure its
// connections that are idle or have not sent their request are closed
// 2 s (on the server's clock) after that began.
func TestFloodFromOneSource(t *testing.T) {
	if testing.Short() {
		t.Skip("1,100 connections a case")
	}
	const n = 1100
	for _, tc := range []struct {
		kind      string
		perSource int // 0: the default
	}{
		{floodPartial, 0},
		{floodIdle, 0},
		{floodPartial, DefaultMaxConns},
		{floodIdle, DefaultMaxConns},
	} {
		name := tc.kind + ", default bounds"
		if tc.perSource != 0 {
			name = tc.kind + ", per-source bound lifted"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			h.member("n1")
			reg := prometheus.NewRegistry()
			srv, base := h.server(ServerOptions{Token: []byte(testToken), ReadToken: []byte(testReadToken), Registry: reg,
				MaxConnsPerSource: tc.perSource})
			hc := fromOtherSource(t)
			start := time.Now()
			ok := flood(t, strings.TrimPrefix(base, "http://"), tc.kind, n)
			// The server has taken the whole flood from its backlog
			// before the other client comes.
			testutil.Eventually(t, testTimeout, "every connection of the flood accepted", func() bool { return srv.conns.seen() == n })
			opened := time.Since(start)
			held, peak := srv.conns.heldBy(flooder)
			took := answered(t, hc, base)
			closed := closedBy(t, reg)
			t.Logf("%d connections from %s opened in %v (%d answered): it holds %d, at most %d were open; closed %v; %s answered /healthz and /v1/nodes in %v",
				n, flooder, opened.Round(time.Millisecond), ok, held, peak, closed, otherSource.IP, took.Round(time.Millisecond))

			if tc.perSource == 0 {
				if peak > DefaultMaxConnsPerSource {
					t.Errorf("the flood held %d connections at once, past the per-source bound %d", peak, DefaultMaxConnsPerSource)
				}
				if closed[closedPerSource] == 0 {
					t.Error("no connection closed for the per-source bound")
				}
				if tc.kind == floodIdle && ok > DefaultMaxConnsPerSource {
					t.Errorf("%d flood connections answered, past the per-source bound %d", ok, DefaultMaxConnsPerSource)
				}
				return
			}
			outside := DefaultMaxConns - reserveOf(DefaultMaxConns)
			if peak > outside {
				t.Errorf("the flood held %d connections at once, past the %d outside the reserve", peak, outside)
			}
			if closed[closedReserve] == 0 {
				t.Error("no connection closed for the reserve")
			}
			// Under pressure, 2 s on the server's clock for those that
			// never complete their headers (every other one of the
			// partial flood), and for those idle once net/http has
			// told them so.
			reason, want := closedHeader, outside/2
			if tc.kind == floodIdle {
				reason, want = closedIdle, held
				testutil.Eventually(t, testTimeout, "the flood's connections idle", func() bool { return srv.conns.inState(http.StateIdle) == held })
			}
			h.advance(pressureHeaderTimeout)
			got := closedBy(t, reg)[reason]
			t.Logf("2 s later on the server's clock: %d closed for %s", got, reason)
			if got < want {
				t.Errorf("%d connections closed for %s 2 s after they began to wait, want at least %d", got, reason, want)
			}
		})
	}
}

// inState returns how many connections are in st.
func (t *connTracker) inState(st http.ConnState) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for c := range t.conns {
		if c.state == st {
			n++
		}
	}
	return n
}

// Under pressure (the open connections at the high-water mark) a
// connection idle, or that has not sent its request, is closed after 2 s
// (on the server's clock), and an answered request's unread body is
// waited for 2 s; once below the mark, the normal timeouts apply again.
// MaxConns is 16 here (mark 12).
func TestPressureTimeouts(t *testing.T) {
	h := newHarness(t)
	const maxConns = 16
	reg := prometheus.NewRegistry()
	srv, base := h.server(ServerOptions{Registry: reg, MaxConns: maxConns, MaxConnsPerSource: maxConns, ReadTimeout: time.Minute})
	addr := strings.TrimPrefix(base, "http://")
	mark := highWaterOf(maxConns)
	open := func() int { return int(srv.conns.open.Load()) }
	dial := func(request string) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(testTimeout))
		fmt.Fprint(c, request)
		return c
	}
	const get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
	const partial = "GET /healthz HTTP/1.1\r\nHost: x\r\n"
	keepAlive := func() (net.Conn, *bufio.Reader) {
		c := dial(get)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return c, br
	}
	idle := func() int { return srv.conns.inState(http.StateIdle) }

	// Below the mark, idle connections stay.
	var idlers []*bufio.Reader
	for range mark - 1 {
		_, br := keepAlive()
		idlers = append(idlers, br)
	}
	testutil.Eventually(t, testTimeout, "the keep-alive connections idle", func() bool { return idle() == mark-1 })
	// The mark is crossed by a connection that sends half a request: it
	// and the idle ones have 2 s from the start of their wait, and keep
	// them although the pressure goes with them.
	slow := dial(partial)
	testutil.Eventually(t, testTimeout, "the half request accepted", func() bool { return open() == mark })
	h.advance(pressureHeaderTimeout - time.Millisecond)
	if n := open(); n != mark {
		t.Fatalf("%d connections open just before the short deadline, want %d", n, mark)
	}
	h.advance(time.Millisecond)
	for i, br := range idlers {
		closedByServer(t, fmt.Sprintf("idle connection %d", i), br)
	}
	closedByServer(t, "the half request", slow)
	if closed := closedBy(t, reg); closed[closedIdle] != mark-1 || closed[closedHeader] != 1 {
		t.Errorf("closed %v, want %d idle_pressure and 1 header_pressure", closed, mark-1)
	}

	// Below the mark: a half request is given the normal header timeout
	// (its timer would have run within Advance), and an idle connection
	// stays.
	testutil.Eventually(t, testTimeout, "every connection gone", func() bool { return open() == 0 })
	dial(partial)
	testutil.Eventually(t, testTimeout, "the half request open", func() bool { return open() == 1 })
	c, br := keepAlive()
	testutil.Eventually(t, testTimeout, "the keep-alive connection idle", func() bool { return idle() == 1 })
	h.advance(2 * pressureHeaderTimeout)
	if n := open(); n != 2 {
		t.Errorf("%d connections open after 4 s without pressure, want the half request and the idle one", n)
	}
	fmt.Fprint(c, get)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the idle connection's second request: %v", err)
	}

	// Under pressure, a POST answered 403 whose body never comes is
	// closed within 2 s, not the read timeout (1 min).
	c.Close()
	testutil.Eventually(t, testTimeout, "the keep-alive connection gone", func() bool { return open() == 1 })
	for range mark - 1 {
		dial(partial)
	}
	testutil.Eventually(t, testTimeout, "the connections at the mark", func() bool { return open() == mark })
	begin := time.Now()
	post := dial("POST /v1/nodes/n1/drain HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
	post.SetDeadline(time.Now().Add(time.Minute / 2))
	resp, err := http.ReadResponse(bufio.NewReader(post), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the POST: %v %v", resp, err)
	}
	closedByServer(t, "the POST without its body", resp.Body)
	if _, err := post.Read(make([]byte, 1)); err == nil {
		t.Error("the POST's connection still open")
	}
	t.Logf("under pressure, the POST without its body was closed %v after it was sent (read timeout 1m)", time.Since(begin).Round(time.Millisecond))
}

// An HTTP/2 connection is idle from its start (net/http says so before
// any stream): under pressure it still has 2 s to send its request, and
// it is answered; idle 2 s after that, it is closed.
func TestPressureHTTP2(t *testing.T) {
	h := newHarness(t)
	const maxConns = 16
	reg := prometheus.NewRegistry()
	srv := NewServer(h.svc, ServerOptions{Clock: h.clk, Logger: testLogger(t), Registry: reg, MaxConns: maxConns, MaxConnsPerSource: maxConns})
	certFile, keyFile, pool := selfSigned(t)
	addr := strings.TrimPrefix(testutil.ServeLocal(t, servingTLS{srv, certFile, keyFile}, testTimeout), "http://")
	// Silent connections (no TLS handshake) up to the mark.
	for range highWaterOf(maxConns) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	testutil.Eventually(t, testTimeout, "the connections at the mark", func() bool { return srv.conns.underPressure() })

	d := &net.Dialer{LocalAddr: otherSource}
	tr := &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: testTimeout}
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("under pressure over HTTP/2: %s, %s", resp.Status, resp.Proto)
	}
	testutil.Eventually(t, testTimeout, "the HTTP/2 connection idle", func() bool { return srv.conns.inState(http.StateIdle) == 1 })
	h.advance(pressureHeaderTimeout)
	if closed := closedBy(t, reg); closed[closedIdle] != 1 {
		t.Errorf("closed %v, want the idle HTTP/2 connection", closed)
	}
}

// servingTLS is a Server that Serve serves over TLS with cert and key.
type servingTLS struct {
	*Server
	cert, key string
}

func (s servingTLS) Serve(l net.Listener) error { return s.ServeTLS(l, s.cert, s.key) }

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool that trusts it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// closedByServer waits until the server has closed the connection r reads
// (r ends), within the connection's own deadline, far below the timeouts
// it would otherwise wait for (2 min idle, 10 s header, 1 min read).
func closedByServer(t *testing.T, what string, r io.Reader) {
	t.Helper()
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: not closed by the server before the client's deadline", what)
	}
}

// sourceOf groups IPv6 addresses by /64 and IPv4-mapped ones with IPv4.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}, "10.1.2.3"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:3:4:5:6"), Port: 5}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff::1"), Port: 5}, "2001:db8:1:2::"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 5, Zone: "eth0"}, "fe80::"},
		{&net.UDPAddr{IP: net.ParseIP("10.9.9.9"), Port: 5}, "10.9.9.9"},
		{&net.UnixAddr{Name: "/run/x.sock", Net: "unix"}, "invalid IP"},
	} {
		if got := sourceOf(tc.addr).String(); got != tc.want {
			t.Errorf("sourceOf(%v) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// addrConn is a connection from a given address that does nothing.
type addrConn struct {
	net.Conn
	remote net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.remote }
func (c addrConn) Close() error         { return nil }

// The admission's bounds, in order: per source (an IPv6 /64 is one), the
// reserve (not for a source that holds reserveShare), the cap.
func TestAdmission(t *testing.T) {
	h := newHarness(t)
	srv := NewServer(h.svc, ServerOptions{Clock: h.clk, MaxConns: 32, MaxConnsPerSource: 12})
	tr := srv.conns // reserve 4 (from 28 open), high-water mark 24
	from := func(ip string) net.Conn {
		return addrConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1}}
	}
	var open []*trackedConn
	take := func(ip string, n int, want string) {
		t.Helper()
		for i := range n {
			c, reason := tr.admit(from(ip))
			if c != nil {
				open = append(open, c)
			}
			if i == n-1 && reason != want {
				t.Fatalf("connection %d from %s: refused for %q, want %q", i+1, ip, reason, want)
			}
			if i < n-1 && c == nil {
				t.Fatalf("connection %d from %s: refused for %q", i+1, ip, reason)
			}
		}
	}
	take("10.0.0.1", 8, "")
	take("2001:db8::1", 6, "")
	take("2001:db8::2", 7, closedPerSource) // the same /64: 12 in all
	take("10.0.0.2", 8, "")                 // 28 open: the reserve's 4 are left
	take("2001:db8:0:1::1", 2, "")          // another /64, holding fewer than 8
	take("10.0.0.2", 1, closedReserve)      // holds 8
	take("10.0.0.1", 1, closedReserve)
	take("10.0.0.3", 2, "")
	take("10.0.0.4", 1, closedCap)
	if n := tr.open.Load(); n != 32 {
		t.Errorf("%d open, want 32", n)
	}
	for _, c := range open {
		c.Close()
	}
	if n := tr.open.Load(); n != 0 || len(tr.bySource) != 0 {
		t.Errorf("after every close: %d open, %d sources", n, len(tr.bySource))
	}
}
