package diagnose

// The first look at a huge process tree: which processes a report
// describes (MaxProcesses), and the counts of the others.

import (
	"context"
	"slices"
	"strconv"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// triage keeps the MaxProcesses worst of pids by their main thread's
// /proc/PID/stat alone (one small read each; the classes need the threads'
// status and stack, too much to read for all of a huge tree): first those
// in D or exiting (unkillable, exit-hang, killable-d to be), and those
// whose main thread exited while threads live on (the kill(2) that
// cgroup.kill misses), then the running and sleeping (missed or still
// running), then single-threaded zombies; by pid within each. The others
// are counted by state; a process gone meanwhile is neither.
func (s *Snapshotter) triage(ctx context.Context, pids []int) ([]int, *Omitted) {
	type ranked struct {
		pid, rank int
		state     string
	}
	all := make([]ranked, 0, len(pids))
	for _, pid := range pids {
		if ctx.Err() != nil {
			break
		}
		data, err := s.proc.ReadFile(ctx, strconv.Itoa(pid)+"/stat")
		if procfs.IsGone(err) {
			continue
		}
		x := ranked{pid: pid, rank: 2, state: "?"}
		if err == nil {
			if st, err := procfs.ParseStat(data); err == nil {
				x.state = st.State
				switch {
				case st.State == "D" || st.Exiting() || (st.State == "Z" && st.NumThreads > 1):
					x.rank = 3
				case st.State == "Z":
					x.rank = 1
				}
			}
		}
		all = append(all, x)
	}
	slices.SortStableFunc(all, func(a, b ranked) int {
		if a.rank != b.rank {
			return b.rank - a.rank
		}
		return a.pid - b.pid
	})
	keep := all[:min(MaxProcesses, len(all))]
	om := &Omitted{ByState: map[string]int{}}
	for _, x := range all[len(keep):] {
		om.Processes++
		om.ByState[x.state]++
	}
	out := make([]int, len(keep))
	for i, x := range keep {
		out[i] = x.pid
	}
	slices.Sort(out)
	if om.Processes == 0 {
		om = nil
	}
	return out, om
}
