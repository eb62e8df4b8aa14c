package actuate

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/gracewatch/gracewatch/internal/fsutil"
	"github.com/gracewatch/gracewatch/internal/nodename"
)

// DrainedFile is the file, under Options.StateDir, where the actuators
// keep the nodes gracewatch drained.
const DrainedFile = "drained.json"

// drainedState is drainedFile's content.
type drainedState struct {
	// Drained are the nodes whose on="down" actuators all succeeded and
	// whose on="up" ones have not yet: gracewatch drained them and owes
	// them an undrain.
	Drained []string `json:"drained"`
}

// LoadDrained reads the drained nodes from dir; a missing file is an
// empty set. A file that does not decode is an error that names it. Names
// that are not node names (nodename.Validate; an older release kept any
// name it was given) are dropped and returned apart, so that the caller
// warns and no actuator is ever given one.
func LoadDrained(dir string) (names []string, invalid []string, err error) {
	path := filepath.Join(dir, DrainedFile)
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var st drainedState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("%s: %w (move it away to start without the memory of past drains)", path, err)
	}
	for _, name := range st.Drained {
		if nodename.Valid(name) {
			names = append(names, name)
		} else {
			invalid = append(invalid, name)
		}
	}
	return names, invalid, nil
}

// saveDrained writes names to dir atomically (a temporary file, fsync,
// rename, fsync of the directory), so that a crash leaves the old set or
// the new one.
func saveDrained(dir string, names []string) error {
	names = slices.Clone(names)
	slices.Sort(names)
	if names == nil {
		names = []string{}
	}
	b, err := json.MarshalIndent(drainedState{Drained: names}, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, DrainedFile), append(b, '\n'), 0o640, ".drained-*.json")
}
