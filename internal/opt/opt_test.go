package opt

import (
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{{0, time.Second}, {-5, time.Second}, {3, 3}} {
		v := c.in
		Default(&v, time.Second)
		if v != c.want {
			t.Errorf("Default(%v, 1s) = %v, want %v", c.in, v, c.want)
		}
	}
	n := 0
	Default(&n, 64)
	if n != 64 {
		t.Errorf("Default(0, 64) = %d", n)
	}
	f := 0.5
	Default(&f, 2.0)
	if f != 0.5 {
		t.Errorf("Default(0.5, 2) = %v", f)
	}
}
