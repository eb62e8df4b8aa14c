package diagnose

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/gracewatch/gracewatch/internal/testutil/hangfs"
)

func TestMain(m *testing.M) {
	hangfs.RunIfRequested()
	runHelperIfRequested()
	goleak.VerifyTestMain(m)
}
