package teardown

// The supervisor's record of a job, and the names a job id maps to.

import (
	"encoding/hex"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/agent/api"
	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// job is the supervisor's record of one job. Exported fields are persisted.
type job struct {
	ID           string        `json:"id"`
	Expiration   time.Time     `json:"expiration,omitzero"`
	NoExpiration bool          `json:"no_expiration,omitempty"`
	Grace        time.Duration `json:"grace"`
	Registered   time.Time     `json:"registered"`
	Ended        time.Time     `json:"ended,omitzero"`
	Deadline     time.Time     `json:"deadline,omitzero"`
	Phase        string        `json:"phase"`
	Cgroup       string        `json:"cgroup,omitempty"`
	Foreign      string        `json:"foreign,omitempty"`
	Epilogs      int           `json:"epilogs"`
	EpilogPIDs   []int         `json:"epilog_pids,omitempty"`
	Escalation   string        `json:"escalation,omitempty"`
	Term         time.Time     `json:"term,omitzero"`
	Kill         time.Time     `json:"kill,omitzero"`
	Violated     bool          `json:"violated,omitempty"`
	Acknowledged bool          `json:"acknowledged,omitempty"` // overdue, but an admin resumed the node
	Latched      bool          `json:"latched,omitempty"`      // this violation latched the node DOWN
	Outcome      string        `json:"outcome,omitempty"`
	Released     time.Time     `json:"released,omitzero"`
	Report       string        `json:"report,omitempty"` // path of the latest saved report
	Summary      string        `json:"summary,omitempty"`

	// Runtime only.
	children    map[int]chan int // epilogue pid → receives its exit status
	timer       clock.Timer
	cancels     []func()
	lastReport  *diagnose.Report
	snapshotRun bool
}

func (j *job) active() bool { return j.Phase == api.PhaseTeardown || j.Phase == api.PhaseOverdue }

func (j *job) wire() api.Job {
	w := api.Job{ID: j.ID, Phase: j.Phase, Grace: j.Grace.String(), Cgroup: j.Cgroup, Foreign: j.Foreign,
		Epilogs: j.Epilogs, Escalation: j.Escalation, Outcome: j.Outcome}
	if !j.NoExpiration {
		e := j.Expiration
		w.Expiration = &e
	}
	if !j.Ended.IsZero() {
		e, d := j.Ended, j.Deadline
		w.Ended, w.Deadline = &e, &d
	}
	if !j.Released.IsZero() {
		r := j.Released
		w.Released = &r
	}
	return w
}

var safeID = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// cgroupName maps a job id to a cgroup directory name: safe ids are kept,
// others are hex-encoded so no id can escape or collide.
func cgroupName(id string) string {
	if safeID.MatchString(id) && id != "." && id != ".." && len(id) <= 100 {
		return "job-" + id
	}
	return "job-x" + hex.EncodeToString([]byte(id))
}

func (s *Supervisor) jobOutDir(id string) string {
	return filepath.Join(s.outDir, strings.TrimPrefix(cgroupName(id), "job-"))
}
