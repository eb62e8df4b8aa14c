package teardown

import (
	"testing"

	"go.uber.org/goleak"
)

// Every supervisor a test starts must be stopped with all its goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
