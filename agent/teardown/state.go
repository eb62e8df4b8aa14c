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

// persisted is what survives an agent restart (docs/DESIGN.md §3.4): registrations,
// teardown clocks, the DOWN latch and the sequence number.
type persisted struct {
	Version int       `json:"version"`
	Node    string    `json:"node"`
	Seq     uint64    `json:"seq"`
	Boots   uint64    `json:"boots"`
	State   NodeState `json:"state"`
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

// How a state file that cannot be written is told (a full or failing
// state dir: ENOSPC, EIO, a read-only file system).
const (
	// stateErrorLogEvery bounds the log lines of a failing streak: the
	// first failure, then one line per this interval with the count.
	stateErrorLogEvery = time.Minute
	// stateRetryAfter is when a failed write is tried again if no event
	// comes first: memory is ahead of the disk until a write succeeds.
	stateRetryAfter = 5 * time.Second
)

// write writes the state file. A failure is logged (rate-limited),
// counted (EventStateWriteError), shown in the status (StateFile) and
// retried; the agent goes on enforcing deadlines from memory.
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
		s.writeFailed(err)
		return
	}
	if e := s.stateErr; e != nil {
		s.log.Info("state file written again", "path", s.statePath, "failed_since", e.Since, "failures", e.Failures)
		s.stateErr = nil
		s.status.StateFile = nil
		s.emit(Event{Kind: EventStateWriteRecovered})
	}
}

// writeFailed records a failed write of the state file.
func (s *Supervisor) writeFailed(err error) {
	now := s.o.Clock.Now()
	e := s.stateErr
	if e == nil {
		e = &StateFileError{Path: s.statePath, Since: now}
		s.stateErr = e
		s.stateErrLogged = time.Time{}
	}
	e.Failures++
	e.Error = err.Error()
	if s.stateErrLogged.IsZero() || now.Sub(s.stateErrLogged) >= stateErrorLogEvery {
		s.stateErrLogged = now
		s.log.Error("cannot write the state file: deadlines are enforced from memory, but a restart loses every change since",
			"path", s.statePath, "err", err, "since", e.Since, "failures", e.Failures)
	}
	c := *e
	s.status.StateFile = &c
	s.emit(Event{Kind: EventStateWriteError, Err: err})
	if s.stateRetry == nil {
		s.stateRetry = s.o.Clock.AfterFunc(stateRetryAfter, func() {
			s.post(func() {
				s.stateRetry = nil
				s.persist()
			})
		})
	}
}
