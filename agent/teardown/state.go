package teardown

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/gracewatch/gracewatch/internal/fsutil"
)

// stateVersion is the version of the persisted state file.
const stateVersion = 1

// persisted is what survives an agent restart (DESIGN.md 3.4): registrations,
// teardown clocks, the DOWN latch and the sequence number.
type persisted struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Seq     uint64    `json:"seq"`
	Boots   uint64    `json:"boots"`
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	Since   time.Time `json:"since"`
	Latch   latch     `json:"latch"`
	Jobs    []*job    `json:"jobs"`
}

// latch is the node's DOWN latch. It is held by the agent, so every
// aggregator sees the same truth.
type latch struct {
	Down   bool      `json:"down"`
	Kind   string    `json:"kind,omitempty"` // "grace" (a violation) or "drain" (an administrator)
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Jobs are the violating jobs; with auto_resume = "when-clean" the latch
	// clears once all of them are released.
	Jobs []string `json:"jobs,omitempty"`
}

// writeFileAtomic writes data to path so that a crash leaves either the old
// or the new content (fsutil.WriteFileAtomic).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	return fsutil.WriteFileAtomic(path, data, perm, "."+filepath.Base(path)+".tmp*")
}

// loadState reads the state file; a missing file is a fresh node.
func loadState(path string) (*persisted, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &persisted{Version: stateVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var p persisted
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("state file %s is corrupt (move it away to start afresh): %w", path, err)
	}
	if p.Version != stateVersion {
		return nil, fmt.Errorf("state file %s has version %d, this agent reads %d", path, p.Version, stateVersion)
	}
	return &p, nil
}

// persist marks the state for writing at the end of the current event
// (flush), so one event writes the file once however many changes it made.
func (s *Supervisor) persist() { s.unsaved = true }

// flush writes the state file if the current event changed it. API calls
// flush before they answer, so an acknowledged registration is durable.
func (s *Supervisor) flush() {
	if s.unsaved {
		s.unsaved = false
		s.write()
	}
}

// write writes the state file. A failure is logged: the agent goes on
// enforcing deadlines from memory.
func (s *Supervisor) write() {
	s.st.Version = stateVersion
	s.st.Node = s.o.Node
	s.st.Jobs = s.st.Jobs[:0]
	ids := make([]string, 0, len(s.jobs))
	for id := range s.jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		s.st.Jobs = append(s.st.Jobs, s.jobs[id])
	}
	// Compact: the file is written after every event, with up to
	// maxReleased released jobs in it; indenting took a third of the
	// encoding, the encoding a quarter of the agent's CPU time in a run
	// of epilogues (perf record), and 0.3-0.5 ms of each epilog.
	data, err := json.Marshal(s.st)
	if err == nil {
		err = writeFileAtomic(s.statePath, data, 0o600)
	}
	if err != nil {
		s.log.Error("cannot persist state", "path", s.statePath, "err", err)
		s.emit(Event{Kind: EventStateWriteError, Err: err})
	}
}
