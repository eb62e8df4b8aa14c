package request

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateUser(t *testing.T) {
	for _, u := range []string{"", "alice", "a.b_c-d", "HOST01$", "x", strings.Repeat("u", MaxUserBytes), "0"} {
		if err := ValidateUser(u); err != nil {
			t.Errorf("ValidateUser(%q) = %v", u, err)
		}
	}
	for u, want := range map[string]string{
		strings.Repeat("u", MaxUserBytes+1): "is 65 bytes, longer than 64",
		"$":                                 "no name before its '$'",
		"-rf":                               "begins with '-'",
		"a$b":                               "'$' at byte 1: only a trailing '$'",
		"a b":                               "a space at byte 1",
		"a\nb":                              "control byte 0x0a at byte 1",
		"été":                               "non-ASCII byte 0xc3 at byte 0",
		"a/b":                               "'/' at byte 1",
		"a;b":                               "';' at byte 1",
	} {
		err := ValidateUser(u)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != "user" || !strings.Contains(ie.Msg, want) {
			t.Errorf("ValidateUser(%q) = %v; want field user, %q", u, err, want)
		}
		if keep, err := CheckUser(u); keep != "" || err == nil {
			t.Errorf("CheckUser(%q) = %q, %v; want it dropped with an error", u, keep, err)
		}
	}
}
