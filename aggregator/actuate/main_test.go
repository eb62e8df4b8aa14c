package actuate

import (
	"log/slog"
	"testing"
	"time"

	"github.com/gracewatch/gracewatch/internal/testutil"
)

// t0 is the start of the tests' fake clocks.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// testTimeout bounds a wait for what the actuators do in goroutines.
const testTimeout = 60 * time.Second

func testLogger(testing.TB) *slog.Logger { return slog.New(slog.DiscardHandler) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, testTimeout, what, cond)
}
