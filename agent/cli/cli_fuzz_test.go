package cli

import (
	"slices"
	"strings"
	"testing"
)

// FuzzLeadingFlags: whatever the arguments, the flags before the command
// and the rest are the arguments in order, and only global flags are
// taken.
func FuzzLeadingFlags(f *testing.F) {
	for _, s := range []string{"--socket\x00/s\x00status", "--socket=/s\x00status", "--json\x00status", "--socket", "-\x00x", "--\x00status", "status\x00--socket\x00/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		flags, rest, err := leadingFlags(args)
		if err != nil {
			return
		}
		if got := append(slices.Clone(flags), rest...); !slices.Equal(got, args) {
			t.Fatalf("leadingFlags(%q) = %q, %q: not a split of the arguments", args, flags, rest)
		}
		for i := 0; i < len(flags); i++ {
			name, _, hasValue := strings.Cut(strings.TrimLeft(flags[i], "-"), "=")
			if !slices.Contains(globalFlags, name) {
				t.Fatalf("took %q, not a global flag", flags[i])
			}
			if !hasValue {
				i++ // its value
			}
		}
	})
}
