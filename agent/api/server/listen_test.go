package server

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

func TestListen(t *testing.T) {
	t.Run("creates the directory, mode 0660", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "run", "agent.sock")
		l, err := Listen(socket, "")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fi, err := os.Lstat(socket)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
			t.Errorf("socket mode %v; want a socket with 0660", fi.Mode())
		}
		di, err := os.Stat(filepath.Dir(socket))
		if err != nil || di.Mode().Perm() != 0o755 {
			t.Errorf("directory: %v, %v; want 0755", di.Mode(), err)
		}
	})
	t.Run("group by name", func(t *testing.T) {
		testutil.Require(t, os.Geteuid() == 0, "chgrp to another group needs root")
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		l, err := Listen(socket, "root")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		fi, _ := os.Stat(socket)
		if gid := fi.Sys().(*syscall.Stat_t).Gid; gid != 0 {
			t.Errorf("gid %d; want 0", gid)
		}
	})
	t.Run("unknown group", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		_, err := Listen(socket, "no-such-group-gw")
		if err == nil || !strings.Contains(err.Error(), "no-such-group-gw") {
			t.Fatalf("Listen error = %v", err)
		}
		if _, err := os.Lstat(socket); !os.IsNotExist(err) {
			t.Errorf("socket left behind: %v", err)
		}
	})
	t.Run("stale socket removed", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		old, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		old.SetUnlinkOnClose(false)
		old.Close() // a crashed agent: the file stays, nobody listens
		if _, err := os.Lstat(socket); err != nil {
			t.Fatalf("stale socket not there: %v", err)
		}
		l, err := Listen(socket, "")
		if err != nil {
			t.Fatalf("Listen over a stale socket: %v", err)
		}
		defer l.Close()
		wantListening(t, socket, "dial the new socket")
	})
	t.Run("live socket refused", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		first, err := Listen(socket, "")
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		_, err = Listen(socket, "")
		if err == nil || !strings.Contains(err.Error(), "another agent is listening") {
			t.Fatalf("second Listen error = %v", err)
		}
		// The first listener still works.
		wantListening(t, socket, "first listener broken")
	})
	t.Run("regular file refused", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		if err := os.WriteFile(socket, []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Listen(socket, "")
		if err == nil || !strings.Contains(err.Error(), "not a socket") {
			t.Fatalf("Listen error = %v", err)
		}
		if data, err := os.ReadFile(socket); err != nil || string(data) != "keep me" {
			t.Errorf("file changed: %q, %v", data, err)
		}
	})
	t.Run("close removes the socket", func(t *testing.T) {
		socket := filepath.Join(shortTempDir(t), "agent.sock")
		l, err := Listen(socket, "")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if _, err := os.Lstat(socket); !os.IsNotExist(err) {
			t.Errorf("socket still there after Close: %v", err)
		}
	})
}

// wantListening fails t unless a listener accepts a connection at socket;
// what says which ("first listener broken").
func wantListening(t *testing.T, socket, what string) {
	t.Helper()
	c, err := net.Dial("unix", socket)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	c.Close()
}
