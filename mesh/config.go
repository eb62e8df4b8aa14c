package mesh

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
	"github.com/gracewatch/gracewatch/proto/gwpb"
	"github.com/hashicorp/memberlist"
)

// Defaults of the [mesh] table.
const (
	DefaultBind           = "0.0.0.0:7946"
	DefaultLabel          = "gracewatch"
	DefaultRejoinInterval = 30 * time.Second

	// minRejoinInterval keeps a typo ("30ms") from turning the rejoin loop
	// into a busy loop against the seeds.
	minRejoinInterval = 100 * time.Millisecond
)

// Config is the [mesh] table of both programs' TOML files. The zero value is
// not usable: start from DefaultConfig.
type Config struct {
	// Bind is the IP:port to listen on, TCP and UDP (memberlist needs both on
	// the same port). Port 0 picks a free port (tests).
	Bind string `toml:"bind"`
	// Advertise is the IP:port other members reach this one at. Empty lets
	// memberlist choose: the bound address, or with 0.0.0.0 the first private
	// (RFC 6890) address of the host.
	Advertise string `toml:"advertise"`
	// Join lists the seeds (host:port; host may be a DNS name). Empty starts
	// a new cluster.
	Join []string `toml:"join"`
	// Label is the cluster label (memberlist Config.Label), sent with and
	// checked on every packet: two clusters with different labels never
	// merge, even when their seed lists cross.
	Label string `toml:"label"`
	// Keyring is the key file (see LoadKeyring): gossip is encrypted and
	// authenticated with AES-GCM. Required unless Insecure.
	Keyring string `toml:"keyring"`
	// Insecure runs without encryption (tests, demos). New logs a warning.
	Insecure bool `toml:"insecure"`
	// NodeKeyFile (agents) is this node's key, as `aggregator node-key
	// NODE` prints it (see LoadNodeKey); AggregatorKeysFile (agents) holds
	// the aggregators' public keys, as `aggregator public-key` prints them;
	// SiteKeyFile (aggregators) is the site key they derive from. See
	// keys.go for the scheme. Required unless AllowUnsigned.
	NodeKeyFile        string `toml:"node_key_file"`
	AggregatorKeysFile string `toml:"aggregator_keys_file"`
	SiteKeyFile        string `toml:"site_key_file"`
	// AllowUnsigned accepts metas and messages that carry no proof (from
	// members without keys), except from a name that has proven itself
	// since start; a wrong proof is refused either way. It exists for a
	// rolling deployment of the keys: anyone with the mesh key can then
	// speak for any unsigned node. New logs a warning. Insecure without key
	// files implies it (an unencrypted mesh proves nothing anyway).
	AllowUnsigned bool `toml:"allow_unsigned"`
	// RejoinInterval is how often the seeds that are not alive members are
	// joined again, so that a healed partition merges and a member whose
	// first join failed keeps trying. 0 disables.
	RejoinInterval config.Duration `toml:"rejoin_interval"`
}

// DefaultConfig returns the documented defaults. Keyring is empty: a real
// deployment must set it (or Insecure).
func DefaultConfig() Config {
	return Config{
		Bind:           DefaultBind,
		Label:          DefaultLabel,
		RejoinInterval: config.Dur(DefaultRejoinInterval),
	}
}

// Validate checks c. Every problem is reported (joined), each a
// *config.KeyError naming its key, e.g. key "mesh.keyring": required
// unless mesh.insecure = true (config.Parse places it at its line).
func (c Config) Validate() error {
	errs := config.Problems{Prefix: "mesh"}
	if err := checkIPPort(c.Bind, true); err != nil {
		errs.Add("bind", "%v", err)
	}
	if c.Advertise != "" {
		if err := checkIPPort(c.Advertise, false); err != nil {
			errs.Add("advertise", "%v", err)
		} else if ip, _, _ := net.SplitHostPort(c.Advertise); net.ParseIP(ip).IsUnspecified() {
			errs.Add("advertise", "%q is not an address others can reach", c.Advertise)
		}
	}
	for i, s := range c.Join {
		if err := checkHostPort(s); err != nil {
			errs.Add(fmt.Sprintf("join[%d]", i), "%v", err)
		}
	}
	switch {
	case c.Label == "":
		errs.Add("label", "must not be empty (it keeps clusters apart)")
	case len(c.Label) > memberlist.LabelMaxSize:
		errs.Add("label", "%d bytes, at most %d", len(c.Label), memberlist.LabelMaxSize)
	}
	switch {
	case c.Keyring == "" && !c.Insecure:
		errs.Add("keyring", "required unless mesh.insecure = true")
	case c.Keyring != "" && c.Insecure:
		errs.Add("insecure", "contradicts mesh.keyring = %q: set one of them", c.Keyring)
	}
	for _, f := range []struct{ key, path string }{
		{"node_key_file", c.NodeKeyFile}, {"aggregator_keys_file", c.AggregatorKeysFile}, {"site_key_file", c.SiteKeyFile},
	} {
		if f.path != "" && !filepath.IsAbs(f.path) {
			errs.Add(f.key, "%q: want an absolute path", f.path)
		}
	}
	if d := c.RejoinInterval.D(); d < 0 || (d > 0 && d < minRejoinInterval) {
		errs.Add("rejoin_interval", "%v: want 0 (off) or at least %v", d, minRejoinInterval)
	}
	return errs.Err()
}

// AcceptsUnsigned reports whether a member of role configured with c
// accepts metas and messages that carry no proof: allow_unsigned, or an
// unencrypted mesh without key files for role (as New decides).
func (c Config) AcceptsUnsigned(role gwpb.Role) bool {
	if c.AllowUnsigned {
		return true
	}
	keys := c.SiteKeyFile != ""
	if role == gwpb.Role_ROLE_AGENT {
		keys = c.NodeKeyFile != ""
	}
	return c.Insecure && !keys
}

// ValidateRole is Validate and the key files role needs: an agent's node
// key and aggregator keys, an aggregator's site key (unless
// allow_unsigned), and none of the other role's.
func (c Config) ValidateRole(role gwpb.Role) error {
	errs := config.Problems{Prefix: "mesh"}
	errs.Include(c.Validate())
	const optOut = "required unless mesh.allow_unsigned = true (see the node restriction in packaging/README.md)"
	// An unencrypted mesh (tests, demos) proves nothing anyway: keys are
	// used if given, not required.
	optional := c.AllowUnsigned || c.Insecure
	switch role {
	case gwpb.Role_ROLE_AGGREGATOR:
		if c.SiteKeyFile == "" && !optional {
			errs.Add("site_key_file", optOut)
		}
		if c.NodeKeyFile != "" {
			errs.Add("node_key_file", "is a node's key; an aggregator derives node keys from mesh.site_key_file")
		}
		if c.AggregatorKeysFile != "" {
			errs.Add("aggregator_keys_file", "is for agents; an aggregator derives the public keys from mesh.site_key_file")
		}
	case gwpb.Role_ROLE_AGENT:
		if c.SiteKeyFile != "" {
			errs.Add("site_key_file", "is the aggregators' secret: it must not be on a compute node (set mesh.node_key_file)")
		}
		switch {
		case c.NodeKeyFile == "" && c.AggregatorKeysFile == "":
			if !optional {
				errs.Add("node_key_file", optOut)
				errs.Add("aggregator_keys_file", optOut)
			}
		case c.NodeKeyFile == "":
			errs.Add("node_key_file", "required with mesh.aggregator_keys_file")
		case c.AggregatorKeysFile == "":
			errs.Add("aggregator_keys_file", "required with mesh.node_key_file")
		}
	}
	return errs.Err()
}

// LoadKeys loads the keys c names for role (nil when it names none:
// allow_unsigned). Errors name the key.
func (c Config) LoadKeys(role gwpb.Role) (*Keys, error) {
	wrap := func(key string, err error) error { return fmt.Errorf("mesh.%s: %w", key, err) }
	switch {
	case role == gwpb.Role_ROLE_AGGREGATOR && c.SiteKeyFile != "":
		sites, err := LoadSiteKeys(c.SiteKeyFile)
		if err != nil {
			return nil, wrap("site_key_file", err)
		}
		return AggregatorKeys(sites)
	case role == gwpb.Role_ROLE_AGENT && c.NodeKeyFile != "":
		node, err := LoadNodeKey(c.NodeKeyFile)
		if err != nil {
			return nil, wrap("node_key_file", err)
		}
		pubs, err := LoadAggregatorKeys(c.AggregatorKeysFile)
		if err != nil {
			return nil, wrap("aggregator_keys_file", err)
		}
		return AgentKeys(node, pubs)
	}
	return nil, nil
}

// checkIPPort accepts "IP:port" (memberlist binds and advertises IP
// literals only; a host name would silently bind every interface).
func checkIPPort(s string, portZeroOK bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want IP:port: %v", s, err)
	}
	if net.ParseIP(host) == nil {
		return fmt.Errorf("%q: host must be an IP address", s)
	}
	return checkPort(s, port, portZeroOK)
}

// checkHostPort accepts "host:port" with a non-empty host (IP or DNS name).
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %v", s, err)
	}
	if host == "" {
		return fmt.Errorf("%q: empty host", s)
	}
	return checkPort(s, port, false)
}

func checkPort(s, port string, zeroOK bool) error {
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return fmt.Errorf("%q: bad port %q", s, port)
	}
	if n == 0 && !zeroOK {
		return fmt.Errorf("%q: port 0", s)
	}
	return nil
}

// splitIPPort splits an already validated IP:port.
func splitIPPort(s string) (string, int) {
	host, port, _ := net.SplitHostPort(s)
	n, _ := strconv.Atoi(port)
	return host, n
}
