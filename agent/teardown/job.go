package teardown

// The supervisor's record of a job, and the names a job id maps to.

import (
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/jobname"
	"github.com/gracewatch/gracewatch/internal/clock"
)

// job is the supervisor's record of one job. Exported fields are persisted.
//
// It is kept apart from the socket API's wire type Job on purpose (as
// node-problem-detector keeps its internal types apart from its API's):
// the state file is this record, free to change with the supervisor's
// needs (the runtime fields, what is persisted, their names), whereas
// Job is a compatibility promise to exec systems, the CLI and the
// mesh. The two meet in one place only, wire. The supervisor takes the
// API's request types and checks as its input contract: they are the
// same checks the CLI and the mesh's job registration make.
type job struct {
	ID           string        `json:"id"`
	Name         string        `json:"name,omitempty"` // jobname.Of(ID) when first named; see name
	Expiration   time.Time     `json:"expiration,omitzero"`
	NoExpiration bool          `json:"no_expiration,omitempty"`
	Grace        time.Duration `json:"grace"`
	Registered   time.Time     `json:"registered"`
	Ended        time.Time     `json:"ended,omitzero"`
	Deadline     time.Time     `json:"deadline,omitzero"`
	Phase        Phase         `json:"phase"`
	Cgroup       string        `json:"cgroup,omitempty"`
	Foreign      string        `json:"foreign,omitempty"`      // observed cgroup's directory
	ForeignName  string        `json:"foreign_name,omitempty"` // and its /proc/PID/cgroup form
	ForeignV1    bool          `json:"foreign_v1,omitempty"`
	ForeignSeen  bool          `json:"foreign_seen,omitempty"` // it held a process once: its emptying is the job's end
	EndedBy      string        `json:"ended_by,omitempty"`     // what told T_end: report, epilog, cgroup
	Asked        time.Time     `json:"asked,omitzero"`         // the E the expiration command was asked about
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
	poll        clock.Timer // v1 observation of the foreign cgroup
	atE         clock.Timer // a running job's expiration: the node turns to teardown
	pids        []int       // the foreign cgroup's processes when last observed
	asking      bool        // the expiration command runs
	readFailing bool        // the last read of the foreign cgroup failed (logged once)
	cancels     []func()
	lastReport  *diagnose.Report
	snapshotRun bool
}

// teardownDeadline is D = min(T_end, E) + G of a job whose end is known.
func (j *job) teardownDeadline() time.Time {
	base := j.Ended
	if !j.NoExpiration && j.Expiration.Before(base) {
		base = j.Expiration
	}
	return base.Add(j.Grace)
}

// pastExpiration reports whether j still runs at now, after its E: no end
// was reported, but its time is up.
func (j *job) pastExpiration(now time.Time) bool {
	return j.Phase == PhaseRunning && !j.NoExpiration && !j.Deadline.IsZero() && !now.Before(j.Expiration)
}

func (j *job) active() bool { return j.Phase == PhaseTeardown || j.Phase == PhaseOverdue }

// view is what the supervisor tells of j.
func (j *job) view() Job {
	v := Job{ID: j.ID, Phase: j.Phase, Grace: j.Grace, Cgroup: j.Cgroup, Foreign: j.Foreign,
		Epilogs: j.Epilogs, Escalation: j.Escalation, Outcome: j.Outcome,
		Ended: j.Ended, Deadline: j.Deadline, Released: j.Released}
	if !j.NoExpiration {
		v.Expiration = j.Expiration
	}
	if !j.Ended.IsZero() {
		v.EndedBy = j.EndedBy
	}
	if j.Foreign != "" {
		v.ForeignName = j.ForeignName
		if j.Phase != PhaseReleased {
			v.Processes = slices.Clone(j.pids)
		}
	}
	return v
}

// name is j's name on the file system (jobname.Of): its cgroup is
// job-<name>, its output directory output/<name>. A job persisted with a
// name keeps it; one persisted by an agent that did not record names
// keeps the name of the cgroup it was given then (adoptName), so a
// teardown in progress across an upgrade is found where it is.
func (j *job) name() string {
	if j.Name == "" {
		j.Name = jobname.Of(j.ID)
	}
	return j.Name
}

// adoptName fills the name of a job read from a state file that has none:
// the name of its cgroup if it has one (the mapping of the agent that made
// it), else the current mapping.
func (j *job) adoptName() {
	if j.Name != "" {
		return
	}
	if j.Cgroup != "" {
		if n, ok := strings.CutPrefix(filepath.Base(j.Cgroup), "job-"); ok && n != "" {
			j.Name = n
			return
		}
	}
	j.Name = jobname.Of(j.ID)
}

func (s *Supervisor) jobOutDir(j *job) string {
	return filepath.Join(s.outDir, j.name())
}
