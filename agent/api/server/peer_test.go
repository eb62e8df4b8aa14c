package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/request"
	"github.com/gracewatch/gracewatch/internal/testutil"
)

// helperEnv makes the test binary act as a client of the socket it names
// (see TestMain) instead of running tests.
const helperEnv = "GRACEWATCH_API_TEST_HELPER_SOCKET"

// helperResult is what the helper client prints.
type helperResult struct {
	UID    int    `json:"uid"`
	Status int    `json:"status"` // HTTP status; 200 when the call succeeded
	Error  string `json:"error"`
}

func TestMain(m *testing.M) {
	if socket := os.Getenv(helperEnv); socket != "" {
		os.Exit(helperClient(socket))
	}
	os.Exit(m.Run())
}

// helperClient calls Status on socket and prints a helperResult.
func helperClient(socket string) int {
	res := helperResult{UID: os.Getuid(), Status: 200}
	_, err := api.NewClient(socket).Status(context.Background())
	var se *api.ServerError
	switch {
	case errors.As(err, &se):
		res.Status, res.Error = se.Status, se.Error()
	case err != nil:
		res.Status, res.Error = 0, err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// TestPeerCredentials runs a real client as uid 65534 (nobody) against
// servers with different allow lists: the uid, the primary gid and a
// supplementary gid (read from /proc/PID/status) each admit it; otherwise it
// gets 403 naming its uid.
func TestPeerCredentials(t *testing.T) {
	testutil.RequireRoot(t)
	const nobody = 65534
	const extraGroup = 4242
	tests := []struct {
		name        string
		opts        ServerOptions
		socketGroup int
		groups      []uint32 // the helper's supplementary groups
		wantStatus  int
	}{
		{"uid not allowed", ServerOptions{AllowedUIDs: []int{0}}, nobody, nil, 403},
		{"gid not allowed", ServerOptions{AllowedUIDs: []int{0}, AllowedGIDs: []int{1234}}, nobody, nil, 403},
		{"uid allowed", ServerOptions{AllowedUIDs: []int{nobody}}, nobody, nil, 200},
		{"primary gid allowed", ServerOptions{AllowedGIDs: []int{nobody}}, nobody, nil, 200},
		{"supplementary gid allowed", ServerOptions{AllowedGIDs: []int{extraGroup}}, extraGroup, []uint32{extraGroup}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := &fakeService{Status_: api.Status{Node: "n1", State: api.StateUp}}
			ts := startServer(t, svc, tt.opts, fmt.Sprint(tt.socketGroup))
			fi, err := os.Stat(ts.socket)
			if err != nil {
				t.Fatal(err)
			}
			if perm := fi.Mode().Perm(); perm != 0o660 {
				t.Errorf("socket mode %v; want 0660", perm)
			}
			if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != uint32(tt.socketGroup) {
				t.Errorf("socket group %d; want %d", gid, tt.socketGroup)
			}
			res := runHelper(t, ts.socket, &syscall.Credential{Uid: nobody, Gid: nobody, Groups: tt.groups})
			if res.UID != nobody {
				t.Fatalf("helper ran as uid %d", res.UID)
			}
			if res.Status != tt.wantStatus {
				t.Fatalf("helper got status %d (%s); want %d", res.Status, res.Error, tt.wantStatus)
			}
			if tt.wantStatus == 403 {
				if !strings.Contains(res.Error, "uid 65534") || !strings.Contains(res.Error, "not allowed") {
					t.Errorf("403 message %q does not name uid 65534", res.Error)
				}
				if n := len(svc.Calls()); n != 0 {
					t.Errorf("service called %d times for a rejected peer", n)
				}
				return
			}
			calls := svc.Calls()
			if len(calls) != 1 || calls[0].Peer.UID != nobody || calls[0].Peer.GID != nobody {
				t.Fatalf("calls = %+v; want one Status call from uid/gid %d", calls, nobody)
			}
			if tt.groups != nil && !equalGroups(calls[0].Peer.Groups, tt.groups) {
				t.Errorf("peer groups %v; want %v", calls[0].Peer.Groups, tt.groups)
			}
		})
	}
}

func equalGroups(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runHelper runs a copy of the test binary (the original's directory is
// private to root) as cred, as a client of socket.
func runHelper(t *testing.T, socket string, cred *syscall.Credential) helperResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(filepath.Dir(socket), "helper")
	if err := copyFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(socket)
	// GORACE: a race-enabled binary otherwise sleeps 1 s at exit.
	cmd.Env = []string{helperEnv + "=" + socket, "GORACE=atexit_sleep_ms=0"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v (stderr %s)", err, stderr.String())
	}
	var res helperResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return res
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestAllowed covers the allow-list logic without processes.
func TestAllowed(t *testing.T) {
	s := NewServer(&fakeService{}, ServerOptions{AllowedUIDs: []int{1000}, AllowedGIDs: []int{50}})
	tests := []struct {
		name string
		p    request.Peer
		want bool
	}{
		{"root", request.Peer{UID: 0, GID: 99}, true},
		{"allowed uid", request.Peer{UID: 1000, GID: 99}, true},
		{"allowed gid", request.Peer{UID: 7, GID: 50}, true},
		{"allowed supplementary", request.Peer{UID: 7, GID: 99, Groups: []uint32{3, 50}}, true},
		{"none", request.Peer{UID: 7, GID: 99, Groups: []uint32{3}}, false},
	}
	for _, tt := range tests {
		if got := s.allowed(tt.p); got != tt.want {
			t.Errorf("%s: allowed(%+v) = %v; want %v", tt.name, tt.p, got, tt.want)
		}
	}
}

func TestReadGroups(t *testing.T) {
	root := t.TempDir()
	write := func(pid, content string) {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("10", "Name:\tepilog\nUid:\t1000\t1000\t1000\t1000\nGroups:\t4 24 27 \nNgid:\t0\n")
	write("11", "Name:\tx\nGroups:\t\n")
	write("12", "Name:\tx\n")
	if g, err := readGroups(root, 10); err != nil || !equalGroups(g, []uint32{4, 24, 27}) {
		t.Errorf("readGroups(10) = %v, %v", g, err)
	}
	if g, err := readGroups(root, 11); err != nil || len(g) != 0 {
		t.Errorf("readGroups(11) = %v, %v", g, err)
	}
	if _, err := readGroups(root, 12); err == nil {
		t.Errorf("readGroups(12) without a Groups line succeeded")
	}
	if _, err := readGroups(root, 13); err == nil {
		t.Errorf("readGroups of a missing pid succeeded")
	}
}
