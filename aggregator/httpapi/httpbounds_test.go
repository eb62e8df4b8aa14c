package httpapi

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/ratelog"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// 10,000 requests with a wrong token (4 clients, keep-alive; a bearer
// token, or the status page's old ?token=) make a bounded number of log
// lines: once per remote host and 10 s, at most ratelog.Burst in all, with
// the count held back.
func TestBadTokenLogBounded(t *testing.T) {
	h := newHarness(t)
	logs := &testutil.SyncBuffer{}
	base := h.serve(ServerOptions{Token: []byte(testToken), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	const total, clients = 10000, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range clients {
		wg.Go(func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for i := range total / clients {
				method, path := "POST", "/v1/nodes/n1/drain"
				switch i % 3 {
				case 1:
					path = "/v1/jobs?token=guess"
				case 2:
					method, path = "GET", "/?token=guess" // the status page's old way
				}
				req, _ := http.NewRequest(method, base+path, strings.NewReader(`{"reason":"x"}`))
				req.Header.Set("Authorization", fmt.Sprintf("Bearer wrong-token-%d", i))
				resp, err := c.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				codes[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	lines := strings.Count(logs.String(), "wrong bearer token") + strings.Count(logs.String(), "?token=")
	t.Logf("%d requests with a wrong token (%v): %d log lines", total, codes, lines)
	if codes[http.StatusUnauthorized]+codes[http.StatusBadRequest] != total {
		t.Errorf("answers %v, want every token refused", codes)
	}
	if lines < 1 || lines > 2*ratelog.Burst {
		t.Errorf("%d log lines for %d bad tokens, want 1..%d", lines, total, 2*ratelog.Burst)
	}
}

// 1,000 connections that announce a body and never send it: at most
// MaxConns are open at once (the others are closed at once), and every one
// is closed by the server's read timeout; then a real request is answered.
// The cap (256) is reached within a small part of the read timeout (5 s)
// however slow the machine (opening 1,000 takes about 1.6 s on one busy
// CPU), so that the cap is what closes the rest.
func TestSlowBodiesBounded(t *testing.T) {
	h := newHarness(t)
	const readTimeout, maxConns = 5 * time.Second, 256
	logs := &testutil.SyncBuffer{}
	srv := NewServer(h.svc, ServerOptions{Token: []byte(testToken), ReadTimeout: readTimeout, Clock: h.clk, MaxConns: maxConns,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := srv.limit(l).(*limitListener)
	var peak int64
	done := make(chan error, 1)
	go func() { done <- srv.hs.Serve(&peakListener{limitListener: ll, peak: &peak}) }()
	defer func() {
		srv.Shutdown(t.Context())
		<-done
	}()
	addr := l.Addr().String()
	const conns = 1000
	// The client waits far longer than the read timeout: a connection
	// that reaches this deadline was not closed by the server, whatever
	// the machine's speed; one the server closed returns at once.
	const clientWait = 60 * time.Second
	type closed struct {
		after  time.Duration // since this connection was opened
		byUs   bool          // the client's own deadline ended it
		reason error
	}
	begin := time.Now()
	closes := make(chan closed, conns)
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		opened := time.Now()
		fmt.Fprintf(c, "POST /v1/nodes/n1/drain HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-wrong-wrong\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")
		wg.Go(func() {
			defer c.Close()
			c.SetReadDeadline(opened.Add(clientWait))
			_, err := io.Copy(io.Discard, c) // until the server closes it
			var ne net.Error
			closes <- closed{after: time.Since(opened), byUs: errors.As(err, &ne) && ne.Timeout(), reason: err}
		})
	}
	wg.Wait()
	close(closes)
	var last time.Duration
	var notClosed int
	for c := range closes {
		last = max(last, c.after)
		if c.byUs {
			notClosed++
		}
	}
	t.Logf("%d slow-body connections: all closed %v after the first opened, each by the server within %v of its opening; at most %d open at once; %d closed at once for the cap",
		conns, time.Since(begin).Round(time.Millisecond), last.Round(time.Millisecond), peak, ll.refused.Load())
	if notClosed > 0 {
		t.Errorf("%d of %d slow connections were still open %v after they were opened: the server's read timeout (%v) did not close them", notClosed, conns, clientWait, readTimeout)
	}
	if peak > maxConns {
		t.Errorf("%d connections open at once, cap %d", peak, maxConns)
	}
	if ll.refused.Load() == 0 {
		t.Error("none closed for the cap")
	}
	if n := strings.Count(logs.String(), "too many open"); n > 2*ratelog.Burst {
		t.Errorf("%d log lines for the connections closed for the cap", n)
	}
	// The server still answers.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/healthz after the flood: %d", resp.StatusCode)
	}
}

// peakListener records the most connections the limitListener held open.
type peakListener struct {
	*limitListener
	peak *int64
}

func (p *peakListener) Accept() (net.Conn, error) {
	c, err := p.limitListener.Accept()
	if err == nil {
		if n := p.limitListener.open.Load(); n > *p.peak {
			*p.peak = n
		}
	}
	return c, err
}
