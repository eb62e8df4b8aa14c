package diagnose

import (
	"context"
	"strconv"

	"github.com/gracewatch/gracewatch/agent/procfs"
)

// mountCache holds the mount tables read during one snapshot, one per mount
// namespace.
type mountCache struct {
	selfNS     string
	selfNSRead bool
	byNS       map[string][]procfs.Mount
}

// mountsOf returns the mount table against which p's readlink targets are
// matched. readlink gives paths as the agent sees them, so a process in the
// agent's own mount namespace is matched against the agent's mountinfo; a
// process in another namespace against its own (the best there is: its
// paths may then be off).
func (s *Snapshotter) mountsOf(ctx context.Context, p *Process, c *mountCache) []procfs.Mount {
	if !c.selfNSRead {
		c.selfNSRead = true
		c.selfNS, _ = s.proc.Readlink(ctx, "self/ns/mnt")
	}
	ns, err := s.proc.Readlink(ctx, strconv.Itoa(p.PID)+"/ns/mnt")
	file := "self/mountinfo"
	if err == nil && ns != c.selfNS {
		file = strconv.Itoa(p.PID) + "/mountinfo"
	} else {
		ns = c.selfNS
	}
	if ms, ok := c.byNS[ns]; ok {
		return ms
	}
	data, err := s.proc.ReadFile(ctx, file)
	if err != nil {
		p.Errors = append(p.Errors, procfs.Unreadable("mountinfo", err))
		return nil // not cached: another process may do better
	}
	ms, err := procfs.ParseMountinfo(data)
	if err != nil {
		p.Errors = append(p.Errors, err.Error())
	}
	c.byNS[ns] = ms
	return ms
}
