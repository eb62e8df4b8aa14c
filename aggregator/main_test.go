package aggregator

import (
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Every test stops the services, servers and commands it starts; goleak
// proves it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLogger logs to the test's output when -v is given.
func testLogger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
