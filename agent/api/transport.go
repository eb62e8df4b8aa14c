package api

// The client's HTTP/1.1, over the agent's Unix socket, written for it: one
// request per connection (Connection: close), a response with a
// Content-Length, a chunked body (the epilog stream) or a body up to the
// end of the connection. net/http is not linked into the client: its
// initialisation and its size (TLS, HTTP/2, proxies) were most of what the
// client added to every exec system's epilog (BENCHMARKS.md, "Epilogue
// latency"). The server is net/http's (package server).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
)

// Bounds of what the client reads from the agent.
const (
	// maxHeaderLine bounds the status line and each header line.
	maxHeaderLine = 8 << 10
	// maxHeaders bounds the number of header lines.
	maxHeaders = 64
	// maxChunkLine bounds a chunk's size line (with its extensions) and a
	// trailer line.
	maxChunkLine = 4 << 10
)

// HTTP methods the client sends.
const (
	methodGet  = "GET"
	methodPost = "POST"
)

// statusOK is HTTP's 200.
const statusOK = 200

// response is an HTTP response from the agent.
type response struct {
	StatusCode  int
	ContentType string // the media type, without parameters, lower case
	// Body is the response's body; closing it closes the connection.
	Body io.ReadCloser
}

// roundTrip sends one request on a new connection and reads the response's
// head. body, if not nil, is JSON. When ctx ends the connection is closed,
// which ends any read of the body.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte) (*response, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	closeConn := func() {
		stop()
		conn.Close()
	}
	var req bytes.Buffer
	req.Grow(256 + len(body))
	req.WriteString(method + " " + path + " HTTP/1.1\r\nHost: nodeagent\r\nAccept: application/json, application/x-ndjson\r\nConnection: close\r\n")
	if body != nil {
		req.WriteString("Content-Type: application/json\r\n")
	}
	if body != nil || method == methodPost {
		req.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		closeConn()
		return nil, err
	}
	resp, err := readResponse(bufio.NewReaderSize(conn, 32<<10))
	if err != nil {
		closeConn()
		return nil, err
	}
	resp.Body = &connBody{Reader: resp.Body, close: closeConn}
	return resp, nil
}

// connBody is a response body whose Close closes its connection.
type connBody struct {
	io.Reader
	close func()
}

func (b *connBody) Close() error {
	b.close()
	return nil
}

// errMalformed marks a response that is not HTTP/1.1 as the client reads
// it.
var errMalformed = errors.New("malformed HTTP response")

// readResponse reads a response's status line and headers from r and
// returns it with a body reader (Body is not a Closer yet).
func readResponse(r *bufio.Reader) (*response, error) {
	line, err := readLine(r, maxHeaderLine, "status line")
	if err != nil {
		return nil, err
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
		return nil, fmt.Errorf("%w: status line %q", errMalformed, clip(line))
	}
	status, err := strconv.Atoi(code)
	if err != nil || status < 100 {
		return nil, fmt.Errorf("%w: status line %q", errMalformed, clip(line))
	}
	resp := &response{StatusCode: status}
	length, chunked := int64(-1), false
	for n := 0; ; n++ {
		if n == maxHeaders {
			return nil, fmt.Errorf("%w: more than %d header lines", errMalformed, maxHeaders)
		}
		line, err := readLine(r, maxHeaderLine, "header line")
		if err != nil {
			return nil, err
		}
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: header line %q", errMalformed, clip(line))
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			l, err := strconv.ParseInt(value, 10, 64)
			if err != nil || l < 0 || (length >= 0 && l != length) {
				return nil, fmt.Errorf("%w: Content-Length %q", errMalformed, clip(value))
			}
			length = l
		case "transfer-encoding":
			if !strings.EqualFold(value, "chunked") {
				return nil, fmt.Errorf("%w: Transfer-Encoding %q", errMalformed, clip(value))
			}
			chunked = true
		case "content-type":
			mt, _, _ := strings.Cut(value, ";")
			resp.ContentType = strings.ToLower(strings.TrimSpace(mt))
		}
	}
	switch {
	case chunked:
		resp.Body = io.NopCloser(&chunkedReader{r: r})
	case length >= 0:
		resp.Body = io.NopCloser(&exactReader{r: io.LimitReader(r, length), left: length})
	default:
		resp.Body = io.NopCloser(r)
	}
	return resp, nil
}

// readLine reads one CRLF- (or LF-) terminated line of at most max bytes,
// without its terminator.
func readLine(r *bufio.Reader, max int, what string) (string, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return "", fmt.Errorf("%w: %s longer than %d bytes", errMalformed, what, max)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%w: connection closed in the %s", io.ErrUnexpectedEOF, what)
		}
		return "", err
	}
	line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
	return string(line), nil
}

// exactReader reads a body of a known length: ending early is an error.
type exactReader struct {
	r    io.Reader
	left int64
}

func (e *exactReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("%w: body ended %d bytes short of its Content-Length", io.ErrUnexpectedEOF, e.left)
	}
	return n, err
}

// chunkedReader decodes HTTP/1.1's chunked transfer coding.
type chunkedReader struct {
	r       *bufio.Reader
	left    int64 // bytes left in the current chunk
	started bool  // a chunk was read: its CRLF comes before the next size
	done    bool
	err     error
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("%w: connection closed inside a chunk", io.ErrUnexpectedEOF)
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads the end of the previous chunk and the next chunk's size; at
// the last chunk it reads the trailer and sets done.
func (c *chunkedReader) next() error {
	if c.started {
		crlf, err := readLine(c.r, 2, "end of a chunk")
		if err != nil {
			return err
		}
		if crlf != "" {
			return fmt.Errorf("%w: chunk longer than its size", errMalformed)
		}
	}
	c.started = true
	line, err := readLine(c.r, maxChunkLine, "chunk size line")
	if err != nil {
		return err
	}
	size, _, _ := strings.Cut(line, ";")
	size = strings.TrimSpace(size)
	n, err := strconv.ParseUint(size, 16, 63)
	if err != nil || size == "" {
		return fmt.Errorf("%w: chunk size %q", errMalformed, clip(size))
	}
	if n > 0 {
		c.left = int64(n)
		return nil
	}
	for i := 0; ; i++ {
		if i == maxHeaders {
			return fmt.Errorf("%w: more than %d trailer lines", errMalformed, maxHeaders)
		}
		t, err := readLine(c.r, maxChunkLine, "trailer line")
		if err != nil {
			return err
		}
		if t == "" {
			c.done = true
			return nil
		}
	}
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// dialUnix connects to a Unix socket.
func dialUnix(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", socket)
}
