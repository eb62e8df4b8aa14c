package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// SocketMode is the permission of the API socket: the owner (root) and the
// socket's group may connect; the server still checks every peer.
const SocketMode = 0o660

// Listen creates the API's Unix socket at path and listens on it. It creates
// the socket's directory (0755) if missing. A socket file left behind by an
// agent that is gone is removed; if an agent still answers on it, or the
// path is not a socket at all, Listen fails and touches nothing. The socket
// gets mode 0660 and, when group is set (a name or a numeric gid), that group
// owner. Closing the listener removes the socket file.
func Listen(path string, group string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("listen: empty socket path")
	}
	gid := -1
	if group != "" {
		g, err := lookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: socket group: %w", path, err)
		}
		gid = g
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("listen on %s: create directory: %w", path, err)
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, SocketMode); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("listen on %s: set group %s: %w", path, group, err)
		}
	}
	return l, nil
}

// removeStale removes path if it is a socket nobody answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen on %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen on %s: the path exists and is not a socket (%s); refusing to remove it", path, fi.Mode().Type())
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("listen on %s: another agent is listening on this socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("listen on %s: cannot tell whether the existing socket is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("listen on %s: remove stale socket: %w", path, err)
	}
	return nil
}

// CheckSocketGroup reports why Listen could not give the socket the group
// group (a name or a numeric gid), or nil.
func CheckSocketGroup(group string) error {
	_, err := lookupGroup(group)
	return err
}

// lookupGroup resolves a group name or numeric gid.
func lookupGroup(group string) (int, error) {
	if n, err := strconv.Atoi(group); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative gid %d", n)
		}
		return n, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}
