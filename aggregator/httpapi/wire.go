package httpapi

// The HTTP edge: the view's nodes (Node, view.go) in the HTTP API's form
// (api.Node, proto/openapi.yaml). Everything the HTTP server, the watch
// stream and the status page send goes through here.

import (
	"time"

	"github.com/gracewatch/gracewatch/aggregator/api"
	"github.com/gracewatch/gracewatch/aggregator/view"
)

// WireNode is n as the HTTP API serves it.
func WireNode(n view.Node) api.Node {
	w := api.Node{Name: n.Name, State: api.State(n.State), Reason: n.Reason, Since: wireTime(n.Since), FreeAt: wireTime(n.FreeAt),
		Schedulable: n.Schedulable, Member: string(n.Member), Role: n.Role, Incarnation: n.Incarnation, Seq: n.Seq,
		DecodeError: n.DecodeError, Teardowns: make([]api.Teardown, len(n.Teardowns))}
	for i, td := range n.Teardowns {
		w.Teardowns[i] = api.Teardown{Job: td.Job, Phase: td.Phase, Ended: wireTime(td.Ended), Deadline: wireTime(td.Deadline),
			Expiration: wireTime(td.Expiration), Grace: td.Grace.Seconds(), Outcome: td.Outcome, Released: wireTime(td.Released),
			User: td.User, Command: td.Command}
	}
	w.Mode = n.Mode
	if wd := n.WouldDrain; wd != nil {
		w.WouldDrain = &api.WouldDrain{At: wireTime(wd.At), Reason: wd.Reason, Jobs: append([]string{}, wd.Jobs...)}
		if c := wd.Cause; c != nil {
			w.WouldDrain.FSType, w.WouldDrain.Source, w.WouldDrain.Mountpoint = c.FSType, c.Source, c.Mountpoint
			w.WouldDrain.Wchan, w.WouldDrain.Class = c.Wchan, c.Class
		}
	}
	if r := n.LastReport; r != nil {
		w.LastReport = &api.Report{Job: r.Job, Stage: r.Stage, Outcome: r.Outcome, Summary: r.Summary, Taken: wireTime(r.Taken),
			Detail: r.Detail}
	}
	return w
}

// wireNodes is nodes as the HTTP API serves them.
func wireNodes(nodes []view.Node) []api.Node {
	out := make([]api.Node, len(nodes))
	for i, n := range nodes {
		out[i] = WireNode(n)
	}
	return out
}

// wireTime is t, or nil (JSON null) for the zero time.
func wireTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
