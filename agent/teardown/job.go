package teardown

// The supervisor's record of a job, and the names a job id maps to.

import (
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gracewatch/gracewatch/agent/diagnose"
	"github.com/gracewatch/gracewatch/agent/jobname"
	"github.com/gracewatch/gracewatch/agent/request"
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
	Observed     bool          `json:"observed,omitempty"`     // overdue in observe mode: never signalled, never latched
	Outcome      string        `json:"outcome,omitempty"`
	Released     time.Time     `json:"released,omitzero"`
	Report       string        `json:"report,omitempty"` // path of the latest saved report
	Summary      string        `json:"summary,omitempty"`
	User         string        `json:"user,omitempty"`        // the job's user, as its registration named it (request.ValidateUser)
	EpilogProg   string        `json:"epilog_prog,omitempty"` // the basename of its latest epilogue's program

	// Runtime only.
	children map[int]chan int // epilogue pid → receives its exit status
	timer    clock.Timer
	poll     clock.Timer // v1 observation of the foreign cgroup
	atE      clock.Timer // a running job's expiration: the node turns to teardown
	pids     []int       // the foreign cgroup's processes when last observed
	asking   bool        // the expiration command runs
	// askUntil bounds the open question (asking), a teardown's or a
	// running job's at E + G: the latch waits for the answer until then
	// (Job.Held).
	askUntil time.Time
	// latchBy is when the latch of an overdue job is due at the latest
	// (escalate: the snapshot's wait, latchWait), until it lands (Job.Held).
	latchBy     time.Time
	readFailing bool // the last read of the foreign cgroup failed (logged once)
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
		Ended: j.Ended, Deadline: j.Deadline, Released: j.Released, User: j.User, Command: j.command()}
	if !j.NoExpiration {
		v.Expiration = j.Expiration
	}
	if j.asking {
		v.Held = j.askUntil
	}
	if j.latchBy.After(v.Held) {
		v.Held = j.latchBy
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

// base is when j's teardown clock started: min(T_end, E), its deadline D
// less its grace G (E while it still runs past its E); zero without a
// deadline.
func (j *job) base() time.Time {
	if j.Deadline.IsZero() {
		return time.Time{}
	}
	return j.Deadline.Add(-j.Grace)
}

// duration is how long j's released teardown took, from its base
// (min(T_end, E)) to its release, so that over G means overdue for a grace
// G; from T_end for a job without a deadline; 0 when neither is known.
func (j *job) duration() time.Duration {
	from := j.base()
	if from.IsZero() {
		from = j.Ended
	}
	if from.IsZero() || j.Released.IsZero() {
		return 0
	}
	return max(j.Released.Sub(from), 0)
}

// maxCommandBytes bounds Job.Command (the mesh's Teardown.command).
const maxCommandBytes = 64

// command is what kept j's teardown running longest, for the cluster's
// teardown history: the worst process's name (comm) in its latest
// diagnosis, else its epilogue's program name; "" when neither is known.
func (j *job) command() string {
	c := j.EpilogProg
	if r := j.lastReport; r != nil {
		if comm := diagnose.CauseOf(r).ExampleComm; comm != "" {
			c = comm
		}
	}
	return printableCut(c, maxCommandBytes)
}

// printableCut is s with its invalid UTF-8 and non-printable characters
// replaced by '?', cut to at most n bytes on a character boundary.
func printableCut(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		if b.Len()+utf8.RuneLen(r) > n {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// setUser names j's user, if u names one and j has none yet; a different
// one than j's is logged and ignored (the first registration's word
// stands: a teardown's record must not change owner).
func (s *Supervisor) setUser(j *job, u string) {
	switch {
	case u == "" || u == j.User:
	case j.User == "":
		j.User = u
		s.log.Info("job user named", "job", j.ID, "user", u)
	default:
		s.log.Warn("job registration names another user than the job's; the job's is kept", "job", j.ID, "user", j.User, "other_user", u)
	}
}

// checkUser applies request.CheckUser to a registration's user of job id:
// a bad one is dropped with a warning in the log, the registration goes on.
func (s *Supervisor) checkUser(id, u string) string {
	keep, err := request.CheckUser(u)
	if err != nil {
		s.log.Warn("job user name refused, the job is supervised without one", "job", id, "err", err)
	}
	return keep
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
