package mesh

// Node restriction: the keys that prove who sent a meta or a message.
//
// The mesh key (keyring.go) is membership and privacy: every compute node
// holds it, so it proves nothing about which node speaks. Authority comes
// from keys that a node does not share with its neighbours:
//
//   - The site key (aggregators only: mesh.site_key_file) is a random secret
//     of at least 32 bytes. From it, each aggregator derives
//   - a node key per node, NodeKey(site, node) = HMAC-SHA256(site,
//     "gracewatch node key v1\x00" + node): provisioned to that node alone
//     (mesh.node_key_file, printed by `aggregator node-key NODE`); the agent
//     proves its meta and its messages with it (HMAC-SHA256), and only the
//     aggregators can check them, by deriving the key again; and
//   - the aggregator signing key, an Ed25519 key whose seed is
//     HMAC-SHA256(site, "gracewatch aggregator signing key v1"): aggregators
//     sign their meta (their role), Control, Handover and Forget with it;
//     agents and aggregators check with the public half
//     (mesh.aggregator_keys_file, printed by `aggregator public-key`).
//
// A node key lets its holder speak for that one node, which is what root on
// that node can do anyway; it cannot sign as an aggregator nor forge another
// node's key. Rotation: the site key file holds several keys, the first
// primary (it signs and it derives the keys `aggregator node-key` prints);
// every key verifies. The aggregator keys file holds several public keys,
// any of which verifies. So a new site key is added second on every
// aggregator, its public key appended on every node, then made primary,
// then the nodes get their new node keys, and the old one is removed.

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/secretfile"
)

// Key sizes.
const (
	// SiteKeyMinBytes is the shortest site key accepted.
	SiteKeyMinBytes = 32
	// NodeKeyBytes is the size of a node key (an HMAC-SHA256 output).
	NodeKeyBytes = sha256.Size
)

const (
	nodeKeyLabel    = "gracewatch node key v1\x00"
	signingKeyLabel = "gracewatch aggregator signing key v1"
)

// NodeKey derives the node key of node from a site key.
func NodeKey(site []byte, node string) []byte {
	mac := hmac.New(sha256.New, site)
	mac.Write([]byte(nodeKeyLabel))
	mac.Write([]byte(node))
	return mac.Sum(nil)
}

// signingKey derives the aggregators' Ed25519 key from a site key.
func signingKey(site []byte) ed25519.PrivateKey {
	mac := hmac.New(sha256.New, site)
	mac.Write([]byte(signingKeyLabel))
	return ed25519.NewKeyFromSeed(mac.Sum(nil))
}

// Keys is what a member holds to prove itself and to check the others. An
// agent's Keys holds its node key and the aggregators' public keys; an
// aggregator's holds the site keys (and what they derive). The zero value
// (or nil) proves nothing and checks nothing.
type Keys struct {
	node    []byte              // an agent's own node key
	sites   [][]byte            // an aggregator's site keys, primary first
	signer  ed25519.PrivateKey  // from sites[0]
	aggPubs []ed25519.PublicKey // who may sign as an aggregator
}

// AgentKeys returns an agent's keys: its node key and the public keys of
// the aggregators.
func AgentKeys(nodeKey []byte, aggregators []ed25519.PublicKey) (*Keys, error) {
	if len(nodeKey) != NodeKeyBytes {
		return nil, fmt.Errorf("node key: %d bytes, want %d", len(nodeKey), NodeKeyBytes)
	}
	if len(aggregators) == 0 {
		return nil, errors.New("no aggregator public key")
	}
	return &Keys{node: bytes.Clone(nodeKey), aggPubs: aggregators}, nil
}

// AggregatorKeys returns an aggregator's keys from the site keys, the
// primary first.
func AggregatorKeys(sites [][]byte) (*Keys, error) {
	if len(sites) == 0 {
		return nil, errors.New("no site key")
	}
	k := &Keys{}
	for i, s := range sites {
		if len(s) < SiteKeyMinBytes {
			return nil, fmt.Errorf("site key %d: %d bytes, want at least %d", i+1, len(s), SiteKeyMinBytes)
		}
		k.sites = append(k.sites, bytes.Clone(s))
		k.aggPubs = append(k.aggPubs, signingKey(s).Public().(ed25519.PublicKey))
	}
	k.signer = signingKey(sites[0])
	return k, nil
}

// NodeKey returns the node key of node under the primary site key (an
// aggregator's Keys only).
func (k *Keys) NodeKey(node string) ([]byte, error) {
	if k == nil || len(k.sites) == 0 {
		return nil, errors.New("node key: no site key")
	}
	if err := nodename.Validate(node); err != nil {
		return nil, fmt.Errorf("node key: %w", err)
	}
	return NodeKey(k.sites[0], node), nil
}

// PublicKeys returns the public keys that verify aggregators, the primary
// first.
func (k *Keys) PublicKeys() []ed25519.PublicKey {
	if k == nil {
		return nil
	}
	return k.aggPubs
}

// canSign reports whether k proves anything.
func (k *Keys) canSign() bool { return k != nil && (k.node != nil || k.signer != nil) }

// EncodeKey is how key files and the CLI write a key: base64 (standard,
// padded).
func EncodeKey(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// LoadSiteKeys reads a site key file: one base64 key of at least
// SiteKeyMinBytes per line, the first primary; '#' comments and blank
// lines are ignored. It is a secret file, read by internal/secretfile's
// policy (0600, or 0640 for the aggregator's group).
func LoadSiteKeys(path string) ([][]byte, error) {
	return secretfile.Keys("site key", path, secretfile.Secret, func(k []byte) error {
		if len(k) < SiteKeyMinBytes {
			return fmt.Errorf("%d bytes, want at least %d (aggregator site-key FILE makes one)", len(k), SiteKeyMinBytes)
		}
		return nil
	})
}

// LoadNodeKey reads a node key file: one base64 key of NodeKeyBytes, as
// `aggregator node-key NODE` prints it. It is a secret file, read by
// internal/secretfile's policy.
func LoadNodeKey(path string) ([]byte, error) {
	keys, err := secretfile.Keys("node key", path, secretfile.Secret, func(k []byte) error {
		if len(k) != NodeKeyBytes {
			return fmt.Errorf("%d bytes, want %d (as `aggregator node-key NODE` prints it)", len(k), NodeKeyBytes)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(keys) > 1 {
		return nil, fmt.Errorf("node key file %s: %d keys, want one", path, len(keys))
	}
	return keys[0], nil
}

// LoadAggregatorKeys reads an aggregator keys file: one base64 Ed25519
// public key per line, as `aggregator public-key` prints them. It is not
// secret, but nobody but its owner may write it (internal/secretfile's
// Public policy).
func LoadAggregatorKeys(path string) ([]ed25519.PublicKey, error) {
	keys, err := secretfile.Keys("aggregator keys", path, secretfile.Public, func(k []byte) error {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("%d bytes, want %d (an Ed25519 public key, as `aggregator public-key` prints it)", len(k), ed25519.PublicKeySize)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ed25519.PublicKey, len(keys))
	for i, k := range keys {
		out[i] = ed25519.PublicKey(k)
	}
	return out, nil
}
