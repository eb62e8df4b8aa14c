package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/request"
)

// checkSameAsMarshal fails t unless appendEpilogRequest writes req as
// encoding/json does: byte for byte when every string is valid UTF-8, and in
// every case JSON that decodes to what encoding/json's output decodes to.
// (Go's releases spell a byte that is not UTF-8 differently: go1.26 writes
// \ufffd, go1.27 the replacement character itself; the agent decodes either
// to the same request.)
func checkSameAsMarshal(t *testing.T, req request.EpilogRequest) {
	t.Helper()
	want, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got := appendEpilogRequest(nil, req)
	if validUTF8(req) && !bytes.Equal(got, want) {
		t.Fatalf("appendEpilogRequest(%#v)\n got %s\nwant %s", req, got, want)
	}
	var g, w request.EpilogRequest
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("appendEpilogRequest(%#v) = %s: not JSON: %v", req, got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("appendEpilogRequest(%#v)\n got %s, decodes to %#v\nwant %s, decodes to %#v", req, got, g, want, w)
	}
}

func validUTF8(req request.EpilogRequest) bool {
	for _, s := range append(append([]string{req.Dir, req.Cgroup, req.User}, req.Argv...), req.Env...) {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func TestAppendEpilogRequest(t *testing.T) {
	for _, req := range []request.EpilogRequest{
		{},
		{Argv: []string{}},
		{Argv: []string{"/bin/true"}},
		{Argv: []string{"/usr/libexec/gracewatch/epilog", "--job", "42"}, Env: []string{"PATH=/usr/bin:/bin", "SLURM_JOB_ID=42"}, Dir: "/var/spool", Cgroup: "/system.slice/slurmstepd.scope/job_42", User: "alice"},
		{Argv: []string{"a\"b\\c", "tab\there", "nl\nret\rbs\bff\f", "\x00\x01\x1f\x7f"}},
		{Argv: []string{"<script>&amp;</script>"}, Env: []string{"X=\u2028\u2029", "Y=é漢字🙂"}},
		{Argv: []string{"bad\xffutf8\xc3", "\xe2\x80"}, Dir: "\xed\xa0\x80"},
		{Argv: []string{"x"}, Env: []string{}, User: "root$"},
	} {
		checkSameAsMarshal(t, req)
	}
}

func FuzzAppendEpilogRequest(f *testing.F) {
	f.Add("/bin/true", "PATH=/bin", "/", "", "alice")
	f.Add("a\"<>&\u2028", "\x00\xff", "\t", "/sys/fs/cgroup/x", "")
	f.Fuzz(func(t *testing.T, argv, env, dir, cgroup, user string) {
		req := request.EpilogRequest{Argv: strings.Split(argv, " "), Dir: dir, Cgroup: cgroup, User: user}
		if env != "" {
			req.Env = strings.Split(env, " ")
		}
		checkSameAsMarshal(t, req)
	})
}

func TestExitFrame(t *testing.T) {
	// Every status the agent can send, as the agent writes it, takes the
	// fast path and reads as encoding/json reads it.
	for s := 0; s <= 255; s++ {
		line, err := json.Marshal(Frame{Stream: "exit", Status: &s})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := exitFrame(line)
		if !ok || got != s {
			t.Fatalf("exitFrame(%s) = %d, %v; want %d, true", line, got, ok, s)
		}
	}
	// Anything else is left to encoding/json (which reports what is wrong).
	for _, line := range []string{
		`{"stream":"exit","status":256}`, `{"stream":"exit","status":-1}`, `{"stream":"exit","status":007}`,
		`{"stream":"exit","status":}`, `{"stream":"exit","status":1e2}`, `{"stream":"exit"}`,
		`{"stream":"exit","status":0,"error":"x"}`, `{"status":0,"stream":"exit"}`, `{"stream":"error","status":0}`,
		` {"stream":"exit","status":0}`, `{"stream":"exit","status":0} `, ``,
	} {
		if s, ok := exitFrame([]byte(line)); ok {
			t.Errorf("exitFrame(%q) = %d, true; want it left to encoding/json", line, s)
		}
	}
}

func FuzzExitFrame(f *testing.F) {
	f.Add([]byte(`{"stream":"exit","status":0}`))
	f.Add([]byte(`{"stream":"exit","status":255}`))
	f.Add([]byte(`{"stream":"exit","status":256}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		got, ok := exitFrame(line)
		if !ok {
			return
		}
		// What the fast path accepts, encoding/json reads the same way.
		var fr Frame
		if err := json.Unmarshal(line, &fr); err != nil {
			t.Fatalf("exitFrame(%q) accepted what encoding/json refuses: %v", line, err)
		}
		if fr.Stream != "exit" || fr.Status == nil || *fr.Status != got || fr.Error != "" || fr.Data != nil {
			t.Fatalf("exitFrame(%q) = %d; encoding/json reads %+v", line, got, fr)
		}
	})
}
