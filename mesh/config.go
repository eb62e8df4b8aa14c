package mesh

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gracewatch/gracewatch/internal/config"
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

// Validate checks c. Every problem is reported (joined), each naming its key,
// e.g. "mesh.keyring: required unless mesh.insecure = true".
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("mesh.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if err := checkIPPort(c.Bind, true); err != nil {
		bad("bind", "%v", err)
	}
	if c.Advertise != "" {
		if err := checkIPPort(c.Advertise, false); err != nil {
			bad("advertise", "%v", err)
		} else if ip, _, _ := net.SplitHostPort(c.Advertise); net.ParseIP(ip).IsUnspecified() {
			bad("advertise", "%q is not an address others can reach", c.Advertise)
		}
	}
	for i, s := range c.Join {
		if err := checkHostPort(s); err != nil {
			bad(fmt.Sprintf("join[%d]", i), "%v", err)
		}
	}
	switch {
	case c.Label == "":
		bad("label", "must not be empty (it keeps clusters apart)")
	case len(c.Label) > memberlist.LabelMaxSize:
		bad("label", "%d bytes, at most %d", len(c.Label), memberlist.LabelMaxSize)
	}
	switch {
	case c.Keyring == "" && !c.Insecure:
		bad("keyring", "required unless mesh.insecure = true")
	case c.Keyring != "" && c.Insecure:
		bad("insecure", "contradicts mesh.keyring = %q: set one of them", c.Keyring)
	}
	if d := c.RejoinInterval.D(); d < 0 || (d > 0 && d < minRejoinInterval) {
		bad("rejoin_interval", "%v: want 0 (off) or at least %v", d, minRejoinInterval)
	}
	return errors.Join(errs...)
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
