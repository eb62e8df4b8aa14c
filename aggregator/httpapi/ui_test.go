package httpapi

import (
	"regexp"
	"strings"
	"testing"
)

// TestStatusPageReadsNoTokenFromItsURL: the page never reads its own URL
// for a token, and its form's input has no name, so even a submission the
// script did not stop (the CSP's form-action 'none' blocks it anyway)
// would carry nothing.
func TestStatusPageReadsNoTokenFromItsURL(t *testing.T) {
	for _, bad := range []string{"location.search", "URLSearchParams", "?token", "token="} {
		if strings.Contains(string(uiPage), bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
	if regexp.MustCompile(`<input[^>]*\bname=`).Match(uiPage) {
		t.Error("an input of the page has a name: a form submission would carry it")
	}
}

func TestContentSecurityPolicy(t *testing.T) {
	for _, c := range []struct {
		name, page, err string
	}{
		{"ok", "<style>a{}</style><script>1</script><script>2</script>", ""},
		{"no script", "<style>a{}</style>", "no inline <script>"},
		{"no style", "<script>1</script>", "no inline <style>"},
		{"unclosed", "<style>a{}</style><script>1", "<script> without </script>"},
	} {
		t.Run(c.name, func(t *testing.T) {
			csp, err := contentSecurityPolicy([]byte(c.page))
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(csp, "'sha256-"); n != 3 {
				t.Errorf("%d hashes in %q, want 3", n, csp)
			}
		})
	}
}
