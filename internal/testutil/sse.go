package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// SSEEvent is one event of a text/event-stream: the fields of its lines up
// to an empty one. Comment is the text of a comment line (": heartbeat").
type SSEEvent struct {
	ID, Event, Data, Comment string
}

// ErrSSEField is ReadSSE's error for a field the standard does not define:
// gracewatch's /v1/watch sends none.
var ErrSSEField = errors.New("unknown SSE field")

// ReadSSE reads the text/event-stream r and hands emit each event that
// is not empty, as the empty line after it ends it. The lines of data of
// one event are joined with "\n", as the standard says; a retry line is
// read and dropped. It returns when r ends: nil at its end, else the read
// error, or ErrSSEField (wrapped, with the line).
func ReadSSE(r io.Reader, emit func(SSEEvent)) error {
	br := bufio.NewReader(r)
	var ev SSEEvent
	data := false
	for {
		line, err := br.ReadString('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev != (SSEEvent{}) {
				emit(ev)
			}
			ev, data = SSEEvent{}, false
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		default:
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimPrefix(v, " ")
			switch k {
			case "id":
				ev.ID = v
			case "event":
				ev.Event = v
			case "data":
				if data {
					ev.Data += "\n"
				}
				ev.Data += v
				data = true
			case "retry":
			default:
				return fmt.Errorf("%w: %q", ErrSSEField, line)
			}
		}
	}
}
