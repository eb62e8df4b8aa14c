package jobname

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	cases := []struct {
		name, id, want string
	}{
		{"slurm", "5123", "5123"},
		{"safe", "f2Zx.step_1-b", "f2Zx.step_1-b"},
		{"colon", "a:b", "a_b+"},
		{"flux f58", "ƒDUUxXH", "__DUUxXH+"},
		{"leading dot", ".x", "_x+"},
		{"leading dash", "-x", "_x+"},
		{"plus", "a+b", "a_b+"},
		{"long safe", strings.Repeat("a", 65), strings.Repeat("a", 32) + "+"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Of(tc.id)
			if strings.HasSuffix(tc.want, "+") {
				if !strings.HasPrefix(got, tc.want) || len(got) != len(tc.want)+hashHex {
					t.Fatalf("Of(%q) = %q, want %q and %d hex digits", tc.id, got, tc.want, hashHex)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("Of(%q) = %q, want %q", tc.id, got, tc.want)
			}
		})
	}
}

// TestOfCollisions: the pairs the earlier mapping (safe ids kept, others
// "x" + hex) gave one name.
func TestOfCollisions(t *testing.T) {
	pairs := [][2]string{
		{"a:b", "x613a62"},
		{"a:b", "a_b"},
		{"ƒ1", "xc692" + "31"},
		{strings.Repeat("a", 101), "x" + strings.Repeat("61", 101)},
		{"a b", "a_b"},
	}
	for _, p := range pairs {
		if Of(p[0]) == Of(p[1]) {
			t.Errorf("Of(%q) = Of(%q) = %q", p[0], p[1], Of(p[0]))
		}
	}
}

func FuzzOf(f *testing.F) {
	for _, s := range []string{"5123", "a:b", "x613a62", "ƒDUUxXH", ".", "..", strings.Repeat("z", 128), "a+b"} {
		f.Add(s, "a_b")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		na := Of(a)
		if na == "" || len(na) > MaxLen || na == "." || na == ".." || strings.ContainsAny(na, "/\x00\n") {
			t.Fatalf("Of(%q) = %q: not a file name", a, na)
		}
		if na[0] == '.' || na[0] == '-' {
			t.Fatalf("Of(%q) = %q starts with %q", a, na, na[0])
		}
		if a != b && na == Of(b) {
			t.Fatalf("Of(%q) = Of(%q) = %q", a, b, na)
		}
		if strings.IndexByte(na, Sep) < 0 && na != a {
			t.Fatalf("Of(%q) = %q: readable names are the id", a, na)
		}
	})
}
