package nodename

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"node1", "c1-23", "n.cluster.example", "a", "7", "gpu_01", strings.Repeat("a", MaxLen)} {
		if err := Validate(ok); err != nil {
			t.Errorf("Validate(%q) = %v, want nil", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                            "empty",
		"node[1-2]":                   `'[' at byte 4`,
		"ALL,x":                       `',' at byte 3`,
		"ALL":                         "reserved",
		"all":                         "reserved",
		"-x":                          "must start with a letter or a digit",
		".x":                          "must start with a letter or a digit",
		"a b":                         `' ' at byte 1`,
		"a\nb":                        `'\n' at byte 1`,
		"nödé":                        "byte 0xc3 at byte 1",
		"a/b":                         `'/' at byte 1`,
		strings.Repeat("a", MaxLen+1): "254 bytes, at most 253",
	} {
		err := Validate(name)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%q) = %v, want ErrInvalid saying %q", name, err, want)
		}
	}
}

func TestQuoteBounded(t *testing.T) {
	q := Quote(strings.Repeat("x", 10000))
	if len(q) > 100 || !strings.Contains(q, "10000 bytes") {
		t.Fatalf("Quote of 10,000 bytes = %q", q)
	}
}

func FuzzValidate(f *testing.F) {
	f.Add("node1")
	f.Add("node[1-2]")
	f.Fuzz(func(t *testing.T, name string) {
		if Validate(name) != nil {
			return
		}
		if len(name) == 0 || len(name) > MaxLen || strings.ContainsAny(name, "[], \t\n\"'$`\\/:") || name[0] == '-' || strings.EqualFold(name, "all") {
			t.Fatalf("Validate accepted %q", name)
		}
	})
}
