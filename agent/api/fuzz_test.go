package api

import (
	"bytes"
	"testing"
)

// FuzzFrames: the client's frame decoder never panics on what a broken or
// hostile server sends, and only returns an exit status in 0..255.
func FuzzFrames(f *testing.F) {
	for _, s := range []string{
		`{"stream":"stdout","data":"aGk="}` + "\n" + `{"stream":"exit","status":7}` + "\n",
		`{"stream":"stderr","data":"aGk="}` + "\n" + `{"stream":"error","error":"x"}` + "\n",
		`{"stream":"exit","status":-1}` + "\n",
		`{"stream":"exit"`,
		"\n\n",
		`{"stream":"stdout","data":5}` + "\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		status, err := readFrames(bytes.NewReader(data), &out, &out)
		if err == nil && (status < 0 || status > 255) {
			t.Fatalf("status %d accepted", status)
		}
		if err != nil && err.Error() == "" {
			t.Fatal("empty error")
		}
	})
}
