package mesh

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/hashicorp/memberlist"
)

// maxKeyFile bounds what LoadKeyring reads: a key file holds a few lines.
const maxKeyFile = 64 << 10

// GenerateKey returns a new random 32-byte (AES-256) key.
func GenerateKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	return k, nil
}

// WriteKeyFile creates path, mode 0600, holding one new key (base64 and a
// newline). It refuses to overwrite an existing file (the error wraps
// fs.ErrExist): replacing a cluster's key is a deliberate rotation.
func WriteKeyFile(path string) error {
	k, err := GenerateKey()
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write key file (refusing to overwrite): %w", err)
	}
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("write key file %s: %w", path, err)
	}
	return nil
}

// LoadKeyring reads a key file: one base64 AES key (16, 24 or 32 bytes) per
// line, the first one primary (used to encrypt; all are tried to decrypt,
// which is how a key is rotated); blank lines and '#' comments are ignored.
// It refuses a file that others can read or that group or others can write,
// and anything but a regular file. Errors name the path and the line.
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s: not a regular file (%v)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o026 != 0 {
		return nil, fmt.Errorf("key file %s has mode %#o: it must not be readable by others nor writable by group or others (chmod 0600 %s)",
			path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("key file %s: larger than %d bytes", path, maxKeyFile)
	}
	keys, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return kr, nil
}

func parseKeys(data []byte) ([][]byte, error) {
	var keys [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxKeyFile+1)
	for line := 1; sc.Scan(); line++ {
		s, _, _ := strings.Cut(sc.Text(), "#")
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("line %d: not a base64 key: %v", line, err)
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("line %d: key is %d bytes, want 16, 24 or 32 (AES-128, -192 or -256)", line, len(k))
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, errors.New("no key")
	}
	return keys, nil
}
