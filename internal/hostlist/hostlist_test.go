package hostlist

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCompress(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		want  string
	}{
		{"empty", nil, ""},
		{"one", []string{"node3"}, "node3"},
		{"ranges and a literal", []string{"node18", "login1", "node3", "node17", "node19"}, "login1,node[3,17-19]"},
		{"duplicates", []string{"n1", "n1", "n2"}, "n[1-2]"},
		{"across a power of ten", []string{"node9", "node10", "node11"}, "node[9-11]"},
		{"zero padding kept", []string{"node003", "node001", "node002"}, "node[001-003]"},
		{"padded and unpadded of the same width", []string{"node098", "node099", "node100", "node101"}, "node[098-101]"},
		{"unpadded too short for the padded group", []string{"node01", "node02", "node3"}, "node3,node[01-02]"},
		{"suffix after the number", []string{"r1n1-ib", "r1n2-ib", "r1n3-ib"}, "r1n[1-3]-ib"},
		{"no digits", []string{"login", "admin"}, "admin,login"},
		{"zero", []string{"n0", "n1", "n00"}, "n[0-1],n00"},
		{"a digit run too long to be a number", []string{"n1234567890123456789"}, "n1234567890123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Compress(tt.names)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Compress(%q) = %q, want %q", tt.names, got, tt.want)
			}
			checkRoundTrip(t, tt.names)
		})
	}
}

func TestCompressRefusesNames(t *testing.T) {
	for _, name := range []string{"", "a,b", "n[1]", "a b", "tab\t", "x]"} {
		if _, err := Compress([]string{"ok1", name}); !errors.Is(err, ErrHostlist) {
			t.Errorf("Compress(%q) error = %v, want ErrHostlist", name, err)
		}
	}
}

func TestExpand(t *testing.T) {
	tests := []struct {
		in   string
		want string // comma-joined
	}{
		{"", ""},
		{"node3", "node3"},
		{"node[3,17-19],login1", "node3,node17,node18,node19,login1"},
		{"node[001-003]", "node001,node002,node003"},
		{"node[08-10]", "node08,node09,node10"},
		{"node[9-10]", "node9,node10"},
		{"r[1-2]n[01-02]", "r1n01,r1n02,r2n01,r2n02"},
		{"n[1-2]-ib,x", "n1-ib,n2-ib,x"},
		{"[1-3]", "1,2,3"},
	}
	for _, tt := range tests {
		got, err := Expand(tt.in)
		if err != nil {
			t.Errorf("Expand(%q): %v", tt.in, err)
			continue
		}
		if strings.Join(got, ",") != tt.want {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	for _, in := range []string{
		",", "a,", ",a", "a,,b", "n[", "n]", "n[1-2", "n[[1]]", "n[]", "n[a]", "n[3-1]", "n[1-2-3]",
		"n[-1]", "n[1,]", "n 1", "n[0-9999999999]", "a[1-1000]b[1-1000]", "n[1234567890123456789]",
	} {
		if got, err := Expand(in); !errors.Is(err, ErrHostlist) {
			t.Errorf("Expand(%q) = %d names, %v; want ErrHostlist", in, len(got), err)
		}
	}
}

// TestCompressRandom checks the round trip on random clusters.
func TestCompressRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prefixes := []string{"node", "n", "rack1-n", "gpu", "login", ""}
	for i := 0; i < 500; i++ {
		var names []string
		for j := r.IntN(50); j > 0; j-- {
			p := prefixes[r.IntN(len(prefixes))]
			n := r.IntN(1200)
			switch r.IntN(4) {
			case 0:
				names = append(names, p+pad(n, 3))
			case 1:
				names = append(names, p+pad(n, 4)+"-ib")
			default:
				names = append(names, p+itoa(n))
			}
		}
		checkRoundTrip(t, names)
	}
}

func pad(n, w int) string {
	s := itoa(n)
	for len(s) < w {
		s = "0" + s
	}
	return s
}

func itoa(n int) string { return formatNum(int64(n), 0) }

// checkRoundTrip checks Expand(Compress(x)) == sorted unique x, and that
// Compress does not depend on the order of x.
func checkRoundTrip(t *testing.T, names []string) {
	t.Helper()
	hl, err := Compress(names)
	if err != nil {
		t.Fatalf("Compress(%q): %v", names, err)
	}
	got, err := Expand(hl)
	if err != nil {
		t.Fatalf("Expand(Compress(%q)) = Expand(%q): %v", names, hl, err)
	}
	want := slices.Clone(names)
	slices.Sort(want)
	want = slices.Compact(want)
	if want == nil {
		want = []string{}
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	if !slices.Equal(sorted, want) || len(got) != len(sorted) {
		t.Fatalf("Expand(Compress(%q)) = Expand(%q) = %q, want %q", names, hl, got, want)
	}
	if len(slices.Compact(sorted)) != len(got) {
		t.Fatalf("Expand(%q) has duplicates: %q", hl, got)
	}
	rev := slices.Clone(names)
	slices.Reverse(rev)
	if hl2, _ := Compress(rev); hl2 != hl {
		t.Fatalf("Compress depends on the order: %q vs %q", hl, hl2)
	}
}

func FuzzHostlistCompress(f *testing.F) {
	for _, s := range []string{"node3,node17,node18", "node001,node002,node100", "a,b1,b01,b001", "r1n1-ib,r1n2-ib", "n0,n00,n000,n1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, joined string) {
		var names []string
		for _, n := range strings.Split(joined, ",") {
			if checkHostname(n) == nil {
				names = append(names, n)
			}
		}
		if len(names) > 200 {
			names = names[:200]
		}
		checkRoundTrip(t, names)
	})
}

func FuzzHostlistExpand(f *testing.F) {
	for _, s := range []string{"node[3,17-19],login1", "node[001-003]", "r[1-2]n[01-02]", "n[9-10]-ib", "", "a[", "n[0-99999999999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names, err := Expand(s)
		if err != nil {
			if !errors.Is(err, ErrHostlist) {
				t.Fatalf("Expand(%q): error %v does not wrap ErrHostlist", s, err)
			}
			return
		}
		if len(names) > MaxExpand {
			t.Fatalf("Expand(%q) gave %d names", s, len(names))
		}
		// Whatever parses compresses and expands back to the same set.
		uniq := slices.Clone(names)
		slices.Sort(uniq)
		uniq = slices.Compact(uniq)
		for _, n := range uniq {
			if err := checkHostname(n); err != nil {
				t.Fatalf("Expand(%q) gave a name Compress refuses: %v", s, err)
			}
		}
		checkRoundTrip(t, uniq)
	})
}
