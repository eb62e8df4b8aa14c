package api

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadResponse: the client's HTTP/1.1 reads what net/http's server
// sends (Content-Length, chunked, to the end of the connection) and refuses
// what is broken, with an error naming what.
func TestReadResponse(t *testing.T) {
	long := strings.Repeat("x", maxHeaderLine)
	tests := []struct {
		name, in    string
		status      int
		contentType string
		body        string
		headErr     string // an error from readResponse
		bodyErr     string // an error reading the body
	}{
		{name: "content length", in: "HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}",
			status: 200, contentType: "application/json", body: "{}"},
		{name: "chunked, extensions and a trailer", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/x-ndjson\r\n\r\n" +
			"3;x=y\r\nabc\r\n1\r\nd\r\n0\r\nX-Trailer: 1\r\n\r\n",
			status: 200, contentType: "application/x-ndjson", body: "abcd"},
		{name: "body to the end of the connection", in: "HTTP/1.0 404 Not Found\n\nnot here",
			status: 404, body: "not here"},
		{name: "header names in any case", in: "HTTP/1.1 200 OK\r\ncontent-LENGTH: 1\r\n\r\nab", status: 200, body: "a"},
		{name: "no status line", in: "", headErr: "connection closed in the status line"},
		{name: "not HTTP", in: "SSH-2.0-x\r\n\r\n", headErr: "malformed HTTP response: status line"},
		{name: "status not a number", in: "HTTP/1.1 2x0 OK\r\n\r\n", headErr: "status line"},
		{name: "header without colon", in: "HTTP/1.1 200 OK\r\nbroken\r\n\r\n", headErr: `header line "broken"`},
		{name: "header line too long", in: "HTTP/1.1 200 OK\r\nX: " + long + "\r\n\r\n", headErr: "header line longer than"},
		{name: "too many headers", in: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X: y\r\n", maxHeaders+1) + "\r\n", headErr: "more than 64 header lines"},
		{name: "negative length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", headErr: "Content-Length"},
		{name: "two lengths", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", headErr: "Content-Length"},
		{name: "unknown transfer coding", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", headErr: "Transfer-Encoding"},
		{name: "headers cut", in: "HTTP/1.1 200 OK\r\nContent-Len", headErr: "connection closed in the header line"},
		{name: "body shorter than its length", in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", status: 200, body: "ab", bodyErr: "3 bytes short"},
		{name: "chunk size not hex", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, bodyErr: `chunk size "zz"`},
		{name: "chunk size overflows", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", status: 200, bodyErr: "chunk size"},
		{name: "chunk longer than its size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n0\r\n\r\n", status: 200, body: "a", bodyErr: "end of a chunk"},
		{name: "connection closed inside a chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", status: 200, body: "ab", bodyErr: "inside a chunk"},
		{name: "no last chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n", status: 200, body: "a", bodyErr: "chunk size line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := readResponse(bufio.NewReader(strings.NewReader(tt.in)))
			if tt.headErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.headErr) {
					t.Fatalf("readResponse error = %v; want one containing %q", err, tt.headErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("readResponse: %v", err)
			}
			if resp.StatusCode != tt.status || resp.ContentType != tt.contentType {
				t.Errorf("status %d, content type %q; want %d, %q", resp.StatusCode, resp.ContentType, tt.status, tt.contentType)
			}
			body, err := io.ReadAll(resp.Body)
			if string(body) != tt.body {
				t.Errorf("body %q; want %q", body, tt.body)
			}
			switch {
			case tt.bodyErr == "" && err != nil:
				t.Errorf("reading the body: %v", err)
			case tt.bodyErr != "" && (err == nil || !strings.Contains(err.Error(), tt.bodyErr)):
				t.Errorf("reading the body: error %v; want one containing %q", err, tt.bodyErr)
			}
		})
	}
}

// FuzzReadResponse: whatever a broken or hostile peer on the socket sends,
// the client's HTTP never panics, never reads a line past its bound, and
// either fails with an error that says something or yields a body that
// ends.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.0 500 x\n\nboom",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;a=b\r\nx\r\n0\r\nT: 1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := readResponse(bufio.NewReaderSize(strings.NewReader(string(data)), 16))
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if resp.StatusCode < 100 || resp.StatusCode > 999 {
			t.Fatalf("status %d accepted", resp.StatusCode)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if n > int64(len(data)) {
			t.Fatalf("a body of %d bytes from %d bytes of input", n, len(data))
		}
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, errMalformed) {
			t.Fatalf("body error of an unexpected kind: %v", err)
		}
	})
}
