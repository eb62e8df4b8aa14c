package testutil

import (
	"errors"
	"strings"
	"testing"
)

func TestReadSSE(t *testing.T) {
	stream := "retry: 2000\n\n" +
		"id: 1-1\nevent: snapshot\ndata: {\"nodes\":[]}\n\n" +
		": heartbeat\n\n" +
		"event: node\ndata: a\ndata: b\n\n" +
		"id: 1-2\n" // not ended by an empty line: not an event
	var got []SSEEvent
	if err := ReadSSE(strings.NewReader(stream), func(ev SSEEvent) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	want := []SSEEvent{{ID: "1-1", Event: "snapshot", Data: `{"nodes":[]}`}, {Comment: "heartbeat"}, {Event: "node", Data: "a\nb"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	err := ReadSSE(strings.NewReader("id: 1\nbogus: x\n\n"), func(SSEEvent) { t.Error("an event emitted before the bad field's end") })
	if !errors.Is(err, ErrSSEField) || !strings.Contains(err.Error(), `"bogus: x"`) {
		t.Errorf("unknown field: %v", err)
	}
}
