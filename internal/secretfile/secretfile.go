// Package secretfile reads and writes the files that hold gracewatch's keys
// and tokens, by one policy (docs/DESIGN.md §6.1), so that the mesh key,
// the site and node keys, the aggregators' public keys and the HTTP tokens
// are all refused or accepted for the same reasons:
//
//   - Kind: the file must be a regular file (a symbolic link to one is
//     followed); a directory, a FIFO or a device is refused without being
//     read (a FIFO would block its reader).
//   - Permissions: a Secret file (mesh key, site key, node key, admin and
//     read tokens) has no permission bit in SecretModeMask (0o027): others
//     may neither read nor write it, its group may read it at most (0600,
//     or 0640 for a service group; 0400 and 0440 too). A Public file (the
//     aggregators' public keys) has no bit in PublicModeMask (0o022): only
//     its owner may write it (0644).
//   - Size: at most MaxSize bytes; a larger file is refused, never
//     truncated.
//   - Format: UTF-8 text, one entry a line. A '#' at the start of a line or
//     after white space begins a comment that runs to the end of the line;
//     blank lines are ignored; each other line, trimmed of surrounding white
//     space, is one entry.
//   - Errors name what the file is and its path, and the line for a fault in
//     the content ("site key file /etc/gracewatch/site.key: line 2: not
//     base64: ..."). A file that cannot be opened keeps its *fs.PathError,
//     so errors.Is(err, fs.ErrNotExist) holds for a missing one.
//
// Create writes a new secret file (mode 0600, never over an existing one,
// synced before it returns). The functions are safe for concurrent use.
package secretfile

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode"
	"unicode/utf8"
)

// Kind is who may read a file.
type Kind int

const (
	// Secret is a file only its owner (and its group, reading) may open.
	Secret Kind = iota
	// Public is a file anyone may read and only its owner may write.
	Public
)

const (
	// SecretModeMask holds the permission bits a Secret file must not have.
	SecretModeMask os.FileMode = 0o027
	// PublicModeMask holds the permission bits a Public file must not have.
	PublicModeMask os.FileMode = 0o022
	// MaxSize bounds what is read: these files hold a few lines.
	MaxSize = 64 << 10
)

// Entry is one line of a file that is neither blank nor a comment.
type Entry struct {
	Line int    // 1-based line number
	Text string // the line without its comment, trimmed
}

// File is a file read by Read: its entries, and what it is and where, for
// errors.
type File struct {
	What    string // e.g. "site key"
	Path    string
	Entries []Entry
}

// Errorf returns an error naming the file and the line.
func (f *File) Errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s file %s: line %d: %w", f.What, f.Path, line, fmt.Errorf(format, args...))
}

// Read reads path, a file of what (e.g. "mesh key") and of kind, by the
// package's policy, and returns its entries. A file with no entry is
// refused ("no entry" in the error).
func Read(what, path string, kind Kind) (*File, error) {
	data, err := readChecked(what, path, kind)
	if err != nil {
		return nil, err
	}
	f := &File{What: what, Path: path}
	f.Entries, err = Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s file %s: %w", what, path, err)
	}
	return f, nil
}

// ErrEmpty is wrapped by the error of a file that holds no entry.
var ErrEmpty = errors.New("no entry (the file holds only blank lines and comments)")

// Parse splits data into entries by the package's format. It fails on data
// that is not UTF-8 text and on data with no entry (ErrEmpty).
func Parse(data []byte) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxSize+1)
	for line := 1; sc.Scan(); line++ {
		s := stripComment(sc.Text())
		if s == "" {
			continue
		}
		if strings.ContainsFunc(s, func(r rune) bool { return r == '\uFFFD' || unicode.IsControl(r) && r != '\t' }) {
			return nil, fmt.Errorf("line %d: holds control characters or invalid UTF-8", line)
		}
		out = append(out, Entry{Line: line, Text: s})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, ErrEmpty
	}
	return out, nil
}

// stripComment removes a comment ('#' at the start or after white space)
// and the white space around what remains.
func stripComment(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] != '#' {
			continue
		}
		if prev, _ := utf8.DecodeLastRuneInString(s[:i]); i == 0 || unicode.IsSpace(prev) {
			s = s[:i]
			break
		}
	}
	return strings.TrimSpace(s)
}

// Keys reads a file of base64 keys (standard encoding, padded), one an
// entry, each of which must pass check (which says what is wrong with a
// key, e.g. its size). The first key is the file's primary one.
func Keys(what, path string, kind Kind, check func([]byte) error) ([][]byte, error) {
	f, err := Read(what, path, kind)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, 0, len(f.Entries))
	for _, e := range f.Entries {
		k, err := base64.StdEncoding.DecodeString(e.Text)
		if err != nil {
			return nil, f.Errorf(e.Line, "not base64: %v", err)
		}
		if err := check(k); err != nil {
			return nil, f.Errorf(e.Line, "%w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// Token reads a Secret file that holds one token: one entry of at least
// minLen bytes, without white space.
func Token(what, path string, minLen int) ([]byte, error) {
	f, err := Read(what, path, Secret)
	if err != nil {
		return nil, err
	}
	if len(f.Entries) > 1 {
		return nil, f.Errorf(f.Entries[1].Line, "a second line: the file must hold one token on one line")
	}
	e := f.Entries[0]
	switch {
	case strings.ContainsFunc(e.Text, unicode.IsSpace):
		return nil, f.Errorf(e.Line, "the token holds white space (want one line, one word)")
	case len(e.Text) < minLen:
		return nil, f.Errorf(e.Line, "the token is %d bytes, want at least %d (e.g. head -c 32 /dev/urandom | base64)", len(e.Text), minLen)
	}
	return []byte(e.Text), nil
}

// readChecked opens path without blocking (a FIFO would), checks its kind,
// permissions and size, and returns its content.
func readChecked(what, path string, kind Kind) ([]byte, error) {
	fd, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", what, err)
	}
	defer fd.Close()
	fi, err := fd.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s file: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s file %s: not a regular file (%v)", what, path, fi.Mode().Type())
	}
	if err := CheckMode(fi.Mode(), kind); err != nil {
		return nil, fmt.Errorf("%s file %s: %w: chmod %s %s", what, path, err, chmodHint(kind), path)
	}
	if fi.Size() > MaxSize {
		return nil, fmt.Errorf("%s file %s: %d bytes, larger than %d", what, path, fi.Size(), MaxSize)
	}
	data, err := io.ReadAll(io.LimitReader(fd, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s file %s: %w", what, path, err)
	}
	if len(data) > MaxSize {
		return nil, fmt.Errorf("%s file %s: larger than %d bytes", what, path, MaxSize)
	}
	return data, nil
}

// CheckMode returns an error (starting "mode") when mode has a
// permission bit that kind forbids.
func CheckMode(mode os.FileMode, kind Kind) error {
	mask, rule := SecretModeMask, "others may neither read nor write it, its group may only read it"
	if kind == Public {
		mask, rule = PublicModeMask, "only its owner may write it"
	}
	if perm := mode.Perm(); perm&mask != 0 {
		want := "0600 or 0640"
		if kind == Public {
			want = "0644"
		}
		return fmt.Errorf("mode %#o is too open (want %s; %s)", perm, want, rule)
	}
	return nil
}

func chmodHint(kind Kind) string {
	if kind == Public {
		return "go-w"
	}
	return "g-wx,o-rwx"
}

// Create writes text to a new Secret file at path, mode 0600: it refuses to
// overwrite an existing file (the error wraps fs.ErrExist; replacing a key
// is a deliberate rotation), and syncs the file before it returns. On a
// failure after the file was made, the file is removed.
func Create(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write %s (refusing to overwrite): %w", path, err)
	}
	_, err = f.WriteString(text)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
