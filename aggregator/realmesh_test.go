package aggregator

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/gracewatch/gracewatch/internal/config"
	gwtestutil "github.com/gracewatch/gracewatch/internal/testutil"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// The tests of what enters the aggregator from the network run it on a
// real mesh (memberlist on 127.0.0.1) and send from a raw memberlist
// member, which can claim any name and any sender: what a compromised or
// misconfigured node can do, with nothing of gracewatch's own sending code
// in the way.

const testLabel = "gracewatch-test"

// realAggregator runs a Service named "agg-1" on a real mesh bound to
// 127.0.0.1:0; both stop at the test's end.
func realAggregator(t *testing.T, opts ...func(*Options)) (*Service, *mesh.Mesh) {
	t.Helper()
	o := Options{Name: "agg-1", Logger: testLogger(t)}
	for _, f := range opts {
		f(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mesh.DefaultConfig()
	cfg.Bind, cfg.Insecure, cfg.Label, cfg.RejoinInterval = "127.0.0.1:0", true, testLabel, config.Duration{}
	// The mesh logs with the Service, so that a test reading the log sees
	// what the mesh refused as well as what the Service did.
	m, err := mesh.New(mesh.Options{Name: o.Name, Role: gwpb.Role_ROLE_AGGREGATOR, Config: cfg, Handler: svc, Logger: o.Logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx, m) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(testTimeout):
			t.Error("Run did not return")
		}
		m.Shutdown()
	})
	return svc, m
}

// rawMember is a memberlist member that speaks gracewatch's wire format by
// hand.
type rawMember struct {
	ml   *memberlist.Memberlist
	meta []byte
}

func (r *rawMember) NodeMeta(limit int) []byte                  { return r.meta }
func (r *rawMember) NotifyMsg([]byte)                           {}
func (r *rawMember) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (r *rawMember) LocalState(join bool) []byte                { return nil }
func (r *rawMember) MergeRemoteState(buf []byte, join bool)     {}

// joinRaw starts a raw member named name publishing meta (nil: none) and
// joins it to the mesh at addr; it leaves at the test's end.
func joinRaw(t *testing.T, addr, name string, meta *gwpb.Meta) *rawMember {
	t.Helper()
	r := &rawMember{}
	if meta != nil {
		b, err := mesh.EncodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		r.meta = b
	}
	c := memberlist.DefaultLocalConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertisePort = name, "127.0.0.1", 0, 0
	c.Label, c.Delegate = testLabel, r
	c.LogOutput = tWriter{t}
	if !testing.Verbose() {
		c.Logger = nil
		c.LogOutput = discard{}
	}
	ml, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	r.ml = ml
	t.Cleanup(func() {
		_ = ml.Leave(time.Second)
		_ = ml.Shutdown()
	})
	if _, err := ml.Join([]string{addr}); err != nil {
		t.Fatal(err)
	}
	return r
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// send sends env to the member to over TCP, as it is: From is whatever env
// claims.
func (r *rawMember) send(t *testing.T, to string, env *gwpb.Envelope) {
	t.Helper()
	env.Schema = gwpb.SchemaVersion
	b, err := mesh.EncodeEnvelope(env)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range r.ml.Members() {
		if n.Name == to {
			if err := r.ml.SendReliable(n, b); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no member %s", to)
}

// stateFrom is a StateUpdate claiming to come from name.
func stateFrom(name string, meta *gwpb.Meta, reason string) *gwpb.Envelope {
	return &gwpb.Envelope{From: name, Body: &gwpb.Envelope_State{State: &gwpb.StateUpdate{Meta: meta, Reason: reason}}}
}

// syncSvc waits until svc has processed every input so far.
func syncSvc(t *testing.T, svc *Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := svc.Sync(ctx); err != nil {
		t.Fatalf("Sync: %v", err)
	}
}

// syncLog collects a Service's log lines for a test to read.
type syncLog struct{ buf gwtestutil.SyncBuffer }

func (l *syncLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func (l *syncLog) String() string { return l.buf.String() }
