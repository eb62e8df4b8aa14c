package testutil

import (
	"strings"
	"testing"
)

// FuzzConfig fuzzes a configuration file's parser from seeds: whatever the
// bytes, parse never panics, its error names the file ("fuzz.toml"), and
// an accepted configuration passes check, which fails t on what no
// accepted configuration may hold.
func FuzzConfig[C any](f *testing.F, seeds []string, parse func(file string, data []byte) (C, error), check func(t *testing.T, cfg C)) {
	f.Helper()
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parse("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		check(t, cfg)
	})
}
