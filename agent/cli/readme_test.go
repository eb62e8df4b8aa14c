package cli

import (
	"testing"

	"github.com/gracewatch/gracewatch/internal/testutil/doccheck"
)

// TestREADMEListsEveryCommand: README.md's CLI reference has the line of
// every command of the table above (name and synopsis, word for word), and
// no line of a command the table lacks.
func TestREADMEListsEveryCommand(t *testing.T) {
	var cmds []doccheck.Command
	for _, c := range program.Commands {
		if c.Name != "help" {
			cmds = append(cmds, doccheck.Command{Name: c.Name, Args: c.Args})
		}
	}
	doccheck.CheckCommands(t, doccheck.Read(t, "README.md"), "nodeagent", "agent/cli's command table (cli.go)", cmds)
}
