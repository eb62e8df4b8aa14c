// Package jobname maps an exec system's job id to the one name the agent
// gives it on the file system: its cgroup (job-NAME), its epilogue output
// directory (output/NAME) and its reports (TIME_NAME.json). Every place
// that turns a job id into a path uses Of, so two ids never share a name
// and every id the API accepts (request.ValidateJobID: up to 128 bytes) maps
// to a name the file system holds.
//
// It is a package of its own, with no dependencies, because the
// diagnostics' report store, the supervisor and the socket API all need it
// and the first cannot import the last.
package jobname

import (
	"crypto/sha256"
	"encoding/hex"
)

// Limits of the readable form.
const (
	// MaxReadable is the longest id kept as it is.
	MaxReadable = 64
	// prefixBytes is how much of an id the hashed form keeps, readable.
	prefixBytes = 32
	// hashHex is the number of hex digits of SHA-256 in the hashed form
	// (128 bits).
	hashHex = 32
	// Sep separates the readable prefix from the hash in the hashed form.
	// Readable names never contain it, so the two forms cannot meet.
	Sep = '+'
)

// MaxLen is the longest name Of returns (the hashed form).
const MaxLen = prefixBytes + 1 + hashHex

// Of returns the name of job id. An id of 1 to MaxReadable bytes of
// [A-Za-z0-9_.-] that starts with a letter or a digit is its own name
// ("5123", "f2Zx.step_1"). Any other id gets a readable prefix (up to 32
// bytes, every byte outside that set written '_') followed by '+' and 32
// hex digits of the SHA-256 of the whole id ("a_b+1f0e...", for "a:b").
//
// Of is injective: readable names contain no '+' and are the id itself,
// hashed ones differ by the hash of the full id. Names are at most MaxLen
// bytes and never start with '.' or '-'. Of is a pure function, safe for
// concurrent use.
func Of(id string) string {
	if readable(id) {
		return id
	}
	b := make([]byte, 0, MaxLen)
	for i := 0; i < len(id) && len(b) < prefixBytes; i++ {
		c := id[i]
		if safe(c) && (len(b) > 0 || alnum(c)) {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	sum := sha256.Sum256([]byte(id))
	b = append(b, Sep)
	b = append(b, hex.EncodeToString(sum[:])[:hashHex]...)
	return string(b)
}

// Cgroup returns the cgroup directory name of job id: "job-" + Of(id).
func Cgroup(id string) string { return "job-" + Of(id) }

func readable(id string) bool {
	if id == "" || len(id) > MaxReadable || !alnum(id[0]) {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !safe(id[i]) {
			return false
		}
	}
	return true
}

func safe(c byte) bool { return alnum(c) || c == '_' || c == '.' || c == '-' }

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
