package e2e

// The shipped Flux actuator (packaging/examples/aggregator/flux-actuator.sh)
// when Flux cannot do what it asks: a broker that is down, one that hangs,
// and (in TestFlux) a node name Flux does not know.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// TestFluxActuatorUnreachable: the shipped Flux actuator against a broker
// that is down (its socket refuses) and one that hangs (it accepts and
// never answers, so flux waits until the aggregator kills it at the
// actuator's timeout): each failure is logged with what failed, retried
// with back-off, and the aggregator keeps serving the node down.
func TestFluxActuatorUnreachable(t *testing.T) {
	prefix := requireFlux(t)
	t.Setenv("PATH", filepath.Join(prefix, "bin")+":"+os.Getenv("PATH"))
	// The actuator's timeout: the hang is ended by it; the refusal needs
	// only flux's own start, which takes seconds on a machine squeezed
	// onto one busy CPU (at 2 s there, it timed out before the refusal).
	for _, tc := range []struct {
		name, want, timeout string
		listen              func(t *testing.T, dir string)
	}{
		{"broker down", "cannot read the drain state of fake0 from Flux", "60s", deadBroker},
		{"flux hangs", "timed out after 2s", "2s", hungBroker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			dir := filepath.Join(c.dir, "broker")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.listen(t, dir)
			t.Setenv("FLUX_URI", "local://"+filepath.Join(dir, "local"))
			c.aggConf = fluxActuators(t, c.dir, tc.timeout)
			agg := c.addAggregator("agg-1")
			c.addAgent("fake0")
			agg.waitNode(t, "fake0", "up", 15*time.Second, func(n node) bool { return n.State == "up" })
			checkActuatorRetries(t, c, agg, "fake0", tc.want)
		})
	}
}

// checkActuatorRetries drains node through the aggregator, whose drain
// actuator is expected to fail with output containing want: the failure is
// logged with the command's output, retried with back-off (the harness's
// first delay is 1 s, doubling), and the aggregator still serves the node
// down with its reason.
func checkActuatorRetries(t *testing.T, c *cluster, g *aggregator, host, want string) {
	t.Helper()
	aggregatorCLI(t, c, g, "drain", host, "--reason", "suspect node")
	g.waitNode(t, host, "down", 10*time.Second, func(n node) bool { return n.State == "down" })
	var as []actuatorAttempt
	if !testutil.Poll(3*time.Minute, func() bool { as = actuatorAttempts(g, host); return len(as) >= 3 }) {
		t.Fatalf("%d actuator attempts for %s within 3 min, want 3: %+v", len(as), host, as)
	}
	for i, a := range as[:3] {
		if a.Msg != "actuator failed" || a.On != "down" || a.Attempt != i+1 {
			t.Fatalf("attempt %d: %+v, want a failed down attempt %d", i+1, a, i+1)
		}
		if !strings.Contains(a.Output+" "+a.Err, want) {
			t.Errorf("attempt %d logged %q / %q, want the failure %q", i+1, a.Err, a.Output, want)
		}
	}
	t.Logf("logged: err %q, output %q", as[0].Err, as[0].Output)
	gap1, gap2 := as[1].Time.Sub(as[0].Time), as[2].Time.Sub(as[1].Time)
	t.Logf("attempts at +0, +%v, +%v", gap1.Round(time.Millisecond), (gap1 + gap2).Round(time.Millisecond))
	if gap1 < time.Second || gap2 < 2*time.Second {
		t.Errorf("retry gaps %v and %v, want back-off of at least 1 s then 2 s", gap1, gap2)
	}
	n, ok := g.node(t, host)
	if !ok || n.State != "down" || !strings.Contains(n.Reason, "suspect node") {
		t.Fatalf("after the failed actuators the aggregator serves %+v, want %s down with its reason", n, host)
	}
	b, _ := json.Marshal(n)
	t.Logf("the aggregator still serves %s", b)
}

// fluxActuators returns packaging/examples/aggregator/actuator-flux.toml,
// running a copy of the shipped flux-actuator.sh (in dir), with timeout
// instead of the shipped one if not empty.
func fluxActuators(t testing.TB, dir, timeout string) string {
	t.Helper()
	script := filepath.Join(dir, "flux-actuator.sh")
	if err := os.WriteFile(script, []byte(actuatorScript(t, "aggregator/flux-actuator.sh")), 0o755); err != nil {
		t.Fatal(err)
	}
	text := readExample(t, "aggregator/actuator-flux.toml")
	if n := strings.Count(text, `"/etc/gracewatch/flux-actuator.sh"`); n != 3 {
		t.Fatalf("actuator-flux.toml runs /etc/gracewatch/flux-actuator.sh %d times, want 3 (down, up and reason)", n)
	}
	text = strings.ReplaceAll(text, `"/etc/gracewatch/flux-actuator.sh"`, fmt.Sprintf("%q", script))
	if timeout != "" {
		if n := strings.Count(text, `timeout = "30s"`); n != 3 {
			t.Fatalf("actuator-flux.toml has %d timeouts of 30s, want 3", n)
		}
		text = strings.ReplaceAll(text, `timeout = "30s"`, fmt.Sprintf("timeout = %q", timeout))
	}
	return "\n" + text
}

// actuatorAttempt is one run of an actuator, from the aggregator's log.
type actuatorAttempt struct {
	Time    time.Time `json:"time"`
	Msg     string    `json:"msg"`
	Node    string    `json:"node"`
	On      string    `json:"transition"`
	Attempt int       `json:"attempt"`
	Err     string    `json:"err"`
	Output  string    `json:"output"`
}

// actuatorAttempts lists the aggregator's actuator runs for node.
func actuatorAttempts(g *aggregator, node string) []actuatorAttempt {
	var out []actuatorAttempt
	for _, line := range strings.Split(g.logs.String(), "\n") {
		var a actuatorAttempt
		if json.Unmarshal([]byte(line), &a) == nil && a.Node == node && (a.Msg == "actuator ran" || a.Msg == "actuator failed") {
			out = append(out, a)
		}
	}
	return out
}

// deadBroker leaves dir/local a socket nobody listens on, as a broker that
// died leaves it: a connect is refused.
func deadBroker(t *testing.T, dir string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "local"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
}

// hungBroker listens on dir/local, accepts every connection and never
// answers, as a broker that is stopped or wedged; it ends with the test.
func hungBroker(t *testing.T, dir string) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "local"))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { l.Close(); <-done })
}
