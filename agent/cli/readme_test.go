package cli

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/doccheck"
)

// TestREADMEListsEveryCommand: README.md's CLI reference has the line of
// every command of the table above (name and synopsis, word for word), and
// no line of a command the table lacks.
func TestREADMEListsEveryCommand(t *testing.T) {
	doccheck.CheckProgram(t, program, "agent/cli's command table (cli.go)")
}
