package mesh

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/internal/secretfile"
)

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
	if err := secretfile.Create(path, base64.StdEncoding.EncodeToString(k)+"\n"); err != nil {
		return fmt.Errorf("write key file: %w", err)
	}
	return nil
}

// LoadKeyring reads a mesh key file: one base64 AES key (16, 24 or 32
// bytes) per line, the first one primary (used to encrypt; all are tried to
// decrypt, which is how a key is rotated). The file is a secret file read
// by internal/secretfile's policy (permissions, size, comments); errors name
// the path and the line.
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := secretfile.Keys("key", path, secretfile.Secret, func(k []byte) error {
		switch len(k) {
		case 16, 24, 32:
			return nil
		}
		return fmt.Errorf("key is %d bytes, want 16, 24 or 32 (AES-128, -192 or -256)", len(k))
	})
	if err != nil {
		return nil, err
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return kr, nil
}
