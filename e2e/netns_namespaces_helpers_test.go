package e2e

// The netns tests' namespaces as the test process handles them: a program
// started inside one (nsenter, checked to be the program itself and in that
// namespace), the aggregator in the hub reached from a thread that entered
// the hub's namespace (hubTransport), and the cleanup that leaves no process,
// link or namespace behind.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// removeNamespaces ends any process still inside one of the test's
// namespaces (by pid), deletes the nft tables, veths and bridge explicitly,
// then the namespaces; it reports what it could not remove.
func (c *netnsCluster) removeNamespaces(names []string) {
	for i := len(names) - 1; i >= 0; i-- {
		ns := names[i]
		if tid := threadIn(ns); tid != 0 {
			c.t.Errorf("thread %d of the test process is in namespace %s", tid, ns)
		}
		if out, err := netnsRun("ip", "netns", "pids", ns); err == nil {
			for _, f := range strings.Fields(out) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
					c.t.Errorf("process %d was still in namespace %s at cleanup; killing it", pid, ns)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_, _ = netnsRun("ip", "netns", "exec", ns, "nft", "delete", "table", "netdev", "gw")
		if ns == c.hub {
			for node := range c.addr {
				_, _ = netnsRun("ip", "-n", ns, "link", "del", "v-"+node)
			}
			_, _ = netnsRun("ip", "-n", ns, "link", "del", "br0")
		}
		if _, err := netnsRun("ip", "netns", "del", ns); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
	}
	if out, err := netnsRun("ip", "netns", "list"); err == nil && strings.Contains(out, c.prefix) {
		c.t.Errorf("cleanup: namespaces left behind:\n%s", out)
	}
}

// keepLog writes p's whole log to $GRACEWATCH_NETNS_LOGDIR/<test>-<name>.log
// when that variable is set (dumpIfFailed shows only the end).
func keepLog(t *testing.T, p *proc) {
	dir := os.Getenv("GRACEWATCH_NETNS_LOGDIR")
	if dir == "" {
		return
	}
	path := filepath.Join(dir, t.Name()+"-"+p.name+".log")
	if err := os.WriteFile(path, []byte(p.logs.String()), 0o644); err != nil {
		t.Errorf("keep log: %v", err)
	}
}

// threadIn returns a thread of this process that is in namespace ns, or 0.
func threadIn(ns string) int {
	var want unix.Stat_t
	if unix.Stat("/run/netns/"+ns, &want) != nil {
		return 0
	}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		var st unix.Stat_t
		if unix.Stat("/proc/self/task/"+task.Name()+"/ns/net", &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			tid, _ := strconv.Atoi(task.Name())
			return tid
		}
	}
	return 0
}

// startIn fills p.args to run argv in namespace ns, starts it, and registers
// its stop (and log dump) as a cleanup.
func (c *netnsCluster) startIn(ns string, p *proc, argv ...string) {
	c.t.Helper()
	p.args = append([]string{"nsenter", "--net=/run/netns/" + ns, "--"}, argv...)
	p.start()
	c.t.Cleanup(func() {
		p.stop()
		p.dumpIfFailed()
		keepLog(c.t, p)
	})
}

// checkIn verifies that pid is the program itself (nsenter exec'd, so
// signals to the pid reach it) and that it runs in namespace ns.
func (c *netnsCluster) checkIn(ns string, pid int, bin string) {
	c.t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || exe != bin {
		c.t.Fatalf("pid %d runs %q (%v), want %s", pid, exe, err, bin)
	}
	var want, got unix.Stat_t
	if err := unix.Stat("/run/netns/"+ns, &want); err != nil {
		c.t.Fatal(err)
	}
	if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &got); err != nil {
		c.t.Fatal(err)
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		c.t.Fatalf("pid %d is not in network namespace %s", pid, ns)
	}
}

// hubTransport sends requests for the test's subnet through connections
// dialled inside the hub namespace, and everything else as before.
type hubTransport struct {
	orig http.RoundTripper
	hub  *http.Transport
}

func (h *hubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if ip := net.ParseIP(r.URL.Hostname()); ip != nil && netnsCIDR.Contains(ip) {
		return h.hub.RoundTrip(r)
	}
	return h.orig.RoundTrip(r)
}

// useHubTransport installs a hubTransport as http.DefaultTransport for the
// test's lifetime, so the harness's helpers (waitReady, nodes, waitNode,
// watch, post), which use the default client, reach the aggregator in the
// hub. Only requests to 198.18.0.0/24 change route. The netns tests must
// therefore not run in parallel with each other (none calls t.Parallel).
func (c *netnsCluster) useHubTransport() {
	path := "/run/netns/" + c.hub
	ht := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, path, network, addr)
		},
		DisableCompression: true,
		MaxIdleConns:       4,
		IdleConnTimeout:    30 * time.Second,
	}
	orig := http.DefaultTransport
	http.DefaultTransport = &hubTransport{orig: orig, hub: ht}
	// Runs before removeNamespaces: an open socket would keep the hub's
	// namespace alive after `ip netns del`.
	c.t.Cleanup(func() {
		http.DefaultTransport = orig
		ht.CloseIdleConnections()
	})
}

// dialInNetns dials addr from a thread that entered the network namespace
// at nsPath. The socket belongs to that namespace for its whole life. The
// thread is never unlocked: it ends with the goroutine, so no other
// goroutine ever runs in the namespace. It is never the main thread.
func dialInNetns(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread: Go wedges rather than ends it, and the
			// process's own namespace is read from it. Dial from another
			// goroutine while this one holds the main thread, so that
			// one cannot land here.
			conn, err := dialInNetns(ctx, nsPath, network, addr)
			runtime.UnlockOSThread()
			ch <- result{conn, err}
			return
		}
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{nil, fmt.Errorf("open %s: %w", nsPath, err)}
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			ch <- result{nil, fmt.Errorf("setns %s: %w", nsPath, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}
