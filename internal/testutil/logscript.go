package testutil

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// LogScript is a shell script for tests of commands that run on events
// (the aggregator's actuators): it appends its arguments after the first,
// as one line, to the log file given as $1; while the file $1.fail holds
// a positive count it fails instead (and counts down).
const LogScript = `#!/bin/sh
log="$1"; shift
if [ -f "$log.fail" ]; then
	n=$(cat "$log.fail")
	if [ "$n" -gt 0 ]; then
		echo $((n - 1)) > "$log.fail"
		echo "failing on purpose" >&2
		exit 3
	fi
fi
echo "$*" >> "$log"
`

// ReadLines returns the lines of the file at path (a LogScript's log);
// none when it does not exist.
func ReadLines(t testing.TB, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}
