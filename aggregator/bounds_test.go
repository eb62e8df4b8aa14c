package aggregator

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gracewatch/gracewatch/aggregator/httpapi"
	"github.com/gracewatch/gracewatch/aggregator/intake"
	"github.com/gracewatch/gracewatch/aggregator/view"
	"github.com/gracewatch/gracewatch/mesh"
	"github.com/gracewatch/gracewatch/proto/gwpb"
)

// maximalUpdate is a StateUpdate as big as an Envelope can carry, cut
// everywhere the aggregator cuts: a reason, teardowns, reports with
// summaries and details, and an unknown field, each over its bound.
func maximalUpdate(seq uint64) *gwpb.StateUpdate {
	meta := downMeta(1, seq, strings.Repeat("m", 64<<10))
	u := &gwpb.StateUpdate{Meta: meta, Reason: strings.Repeat("r", 1<<20)}
	for i := range 2 * intake.MaxTeardownsKept {
		u.Teardowns = append(u.Teardowns, &gwpb.Teardown{Job: strings.Repeat("j", 1024) + fmt.Sprint(i), Phase: "overdue", Outcome: strings.Repeat("o", 512)})
	}
	detail := []byte(`{"procs":"` + strings.Repeat("d", 150<<10) + `"}`)
	for i := range 2 * intake.MaxReportsKept {
		u.Reports = append(u.Reports, &gwpb.Report{Job: fmt.Sprint(i), Summary: strings.Repeat("s", 8<<10), TakenMs: int64(1000 + i), DetailJson: detail})
	}
	u.ProtoReflect().SetUnknown(protowireUnknown(256 << 10))
	return u
}

// protowireUnknown is an unknown length-delimited field 1000 of n bytes.
func protowireUnknown(n int) protoreflect.RawFields {
	b := []byte{0xc2, 0x3e} // field 1000, wire type 2
	for v := uint64(n); ; v >>= 7 {
		if v < 0x80 {
			b = append(b, byte(v))
			break
		}
		b = append(b, byte(v)|0x80)
	}
	return append(b, make([]byte, n)...)
}

func TestBoundUpdate(t *testing.T) {
	u := maximalUpdate(2)
	b := intake.BoundUpdate(u)
	if len(b.GetReason()) > view.MaxUpdateReasonBytes || !strings.HasSuffix(b.GetReason(), fmt.Sprintf(view.CutMarker, 1<<20)) {
		t.Errorf("reason: %d bytes, ends %q", len(b.GetReason()), b.GetReason()[max(0, len(b.GetReason())-40):])
	}
	if len(b.GetMeta().GetReason()) > view.MaxUpdateReasonBytes || b.GetMeta().GetSeq() != 2 || b.GetMeta().GetState() != gwpb.State_STATE_DOWN {
		t.Errorf("meta: %d bytes of reason, seq %d, %v", len(b.GetMeta().GetReason()), b.GetMeta().GetSeq(), b.GetMeta().GetState())
	}
	if len(b.GetTeardowns()) != intake.MaxTeardownsKept || len(b.GetTeardowns()[0].GetJob()) > intake.MaxFieldBytes {
		t.Errorf("%d teardowns, the first's job %d bytes", len(b.GetTeardowns()), len(b.GetTeardowns()[0].GetJob()))
	}
	reps := b.GetReports()
	if len(reps) != intake.MaxReportsKept || reps[len(reps)-1].GetTakenMs() != int64(1000+2*intake.MaxReportsKept-1) || reps[0].GetTakenMs() != int64(1000+intake.MaxReportsKept) {
		t.Fatalf("%d reports, want the %d newest in order", len(reps), intake.MaxReportsKept)
	}
	for i, r := range reps {
		if len(r.GetSummary()) > intake.MaxSummaryBytes {
			t.Errorf("report %d: summary %d bytes", i, len(r.GetSummary()))
		}
		if i < len(reps)-1 && len(r.GetDetailJson()) > 0 {
			t.Errorf("report %d (not the newest) keeps its detail", i)
		}
	}
	newest := reps[len(reps)-1].GetDetailJson()
	var note map[string]any
	if len(newest) > intake.MaxDetailBytes || json.Unmarshal(newest, &note) != nil || note["cut"] != true {
		t.Errorf("newest detail: %d bytes %.100s", len(newest), newest)
	}
	if len(b.ProtoReflect().GetUnknown()) != 0 {
		t.Error("unknown fields kept")
	}
	if size := proto.Size(b); size > view.MaxUpdateReasonBytes*2+intake.MaxTeardownsKept*600+intake.MaxReportsKept*(intake.MaxSummaryBytes+600)+intake.MaxDetailBytes {
		t.Errorf("bounded update is %d bytes", size)
	}
	// A small update is kept as it is.
	small := &gwpb.StateUpdate{Meta: downMeta(1, 3, "hung"), Reason: "hung", Reports: []*gwpb.Report{{Job: "7", Summary: "s", TakenMs: 5, DetailJson: []byte(`{}`)}}}
	if !proto.Equal(intake.BoundUpdate(small), small) {
		t.Errorf("small update changed: %v", intake.BoundUpdate(small))
	}
}

// intake.BoundMeta and intake.BoundUpdate copy field by field: a field added to the
// schema must be added there too, or it is lost at the intake. This test
// fills every field and fails when one is not copied.
func TestBoundCopiesEveryField(t *testing.T) {
	fill := func(m protoreflect.Message) {
		fields := m.Descriptor().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			switch f.Kind() {
			case protoreflect.StringKind:
				m.Set(f, protoreflect.ValueOfString("x"))
			case protoreflect.BytesKind:
				m.Set(f, protoreflect.ValueOfBytes([]byte("{}")))
			case protoreflect.EnumKind:
				m.Set(f, protoreflect.ValueOfEnum(1))
			case protoreflect.BoolKind:
				m.Set(f, protoreflect.ValueOfBool(true))
			case protoreflect.Uint32Kind:
				m.Set(f, protoreflect.ValueOfUint32(1))
			case protoreflect.Uint64Kind:
				m.Set(f, protoreflect.ValueOfUint64(1))
			case protoreflect.Int64Kind:
				m.Set(f, protoreflect.ValueOfInt64(1))
			case protoreflect.Int32Kind:
				m.Set(f, protoreflect.ValueOfInt32(1))
			case protoreflect.MessageKind:
				// The nested messages are filled on their own below.
			default:
				t.Fatalf("%s: kind %v not filled by this test", f.FullName(), f.Kind())
			}
		}
	}
	meta, td, rep, cause, observed := &gwpb.Meta{}, &gwpb.Teardown{}, &gwpb.Report{}, &gwpb.Cause{}, &gwpb.Cause{}
	fill(meta.ProtoReflect())
	fill(td.ProtoReflect())
	fill(rep.ProtoReflect())
	fill(cause.ProtoReflect())
	fill(observed.ProtoReflect())
	observed.Fstype = "observed"
	u := &gwpb.StateUpdate{Meta: meta, Reason: "r", Teardowns: []*gwpb.Teardown{td}, Reports: []*gwpb.Report{rep}, StartedMs: 7,
		Cause: cause, Clean: true, AdminDrain: true, Mode: gwpb.Mode_MODE_OBSERVE, ObservedCause: observed,
		KillPathFloorMs: 9, KillPath: "k"}
	if n := (&gwpb.StateUpdate{}).ProtoReflect().Descriptor().Fields().Len(); n != 12 {
		t.Errorf("StateUpdate has %d fields; intake.BoundUpdate copies 12", n)
	}
	if b := intake.BoundUpdate(u); !proto.Equal(b, u) {
		t.Errorf("intake.BoundUpdate lost a field:\n got %v\nwant %v", b, u)
	}
}

func TestCutText(t *testing.T) {
	for _, s := range []string{"", "short", strings.Repeat("é", 3000), strings.Repeat("x", 5000)} {
		c := view.CutText(s, 100)
		if len(c) > 100 && len(s) > 100 || !utf8.ValidString(c) || (len(s) <= 100 && c != s) {
			t.Errorf("cutText(%d bytes) = %d bytes %q", len(s), len(c), c)
		}
	}
}

// Three Handovers of 10,000 invented gone members each, sent over a real
// mesh: the aggregator adopts at most intake.MaxAdoptedGone in all, once each,
// and a Handover repeating names adds nothing. Each is sent once the one
// before it is handled (the aggregator logs what it adopted, or what it
// did not for the bound), so that the count at the end is taken after
// the aggregator has handled every one.
func TestHandoverBounds(t *testing.T) {
	var log syncLog
	svc, m := realAggregator(t, func(o *Options) { o.Logger = log.logger() })
	peer := joinRaw(t, m.Addr(), "agg-0", nil)
	handled := func() int {
		s := log.String()
		return strings.Count(s, "gone nodes learned from another aggregator") + strings.Count(s, "handover over its bound")
	}
	send := func(h *gwpb.Handover) {
		t.Helper()
		before := handled()
		peer.send(t, "agg-1", &gwpb.Envelope{From: "agg-0", Body: &gwpb.Envelope_Handover{Handover: h}})
		waitFor(t, fmt.Sprintf("handover %d to be handled", before+1), func() bool { return handled() > before })
	}
	for round := range 3 {
		h := &gwpb.Handover{}
		for i := range intake.MaxHandover {
			h.Gone = append(h.Gone, &gwpb.GoneMember{Name: fmt.Sprintf("ghost%d-%d", round, i), Meta: downMeta(1, 1, "x")})
		}
		send(h)
	}
	// And one that repeats a name many times.
	h := &gwpb.Handover{}
	for range 100 {
		h.Gone = append(h.Gone, &gwpb.GoneMember{Name: "ghost-again", Meta: downMeta(1, 1, "x")})
	}
	send(h)
	if n := handled(); n != 4 {
		t.Errorf("%d handover log lines for 4 handovers:\n%s", n, log.String())
	}
	syncSvc(t, svc)
	if n := len(svc.Nodes()); n != intake.MaxAdoptedGone {
		t.Errorf("%d nodes adopted, want the bound %d", n, intake.MaxAdoptedGone)
	}
}

// Past http.max_watchers a watch is refused with 503 and Retry-After,
// while the API answers; 5,000 attempts over real HTTP on loopback.
func TestWatchersCap(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 connections")
	}
	h := newHarness(t)
	h.member("n1", upMeta(1, 1))
	const max = 64
	// Every client here is 127.0.0.1: the per-source bound is lifted.
	base := h.serve(httpapi.ServerOptions{MaxWatchers: max, MaxConnsPerSource: httpapi.DefaultMaxConns})
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: testTimeout}

	// The cap's worth of watchers, held open.
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for range max {
		resp, err := hc.Get(base + "/v1/watch")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("watch within the cap: %d", resp.StatusCode)
		}
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
	}
	const attempts = 5000
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for range attempts {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			code, retry := 0, ""
			if resp, err := hc.Get(base + "/v1/watch"); err == nil {
				code, retry = resp.StatusCode, resp.Header.Get("Retry-After")
				resp.Body.Close()
			}
			if code == 503 && retry == "" {
				code = -503
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	// The API answers meanwhile.
	r := call(t, "GET", base+"/v1/nodes", "", "")
	wg.Wait()
	if r.status != 200 {
		t.Errorf("GET /v1/nodes during the attempts: %d", r.status)
	}
	if codes[503] != attempts {
		t.Errorf("attempts past the cap answered %v, want %d × 503 with Retry-After", codes, attempts)
	}
	if n := h.svc.numSubscribers(); n != max {
		t.Errorf("%d subscribers, want %d", n, max)
	}
	rr := call(t, "GET", base+"/v1/watch", "", "")
	if ra, err := strconv.Atoi(rr.header.Get("Retry-After")); rr.status != 503 || err != nil || ra <= 0 || !strings.Contains(rr.errorMsg(t), "too many watchers") {
		t.Errorf("refused watch: %d %v %s", rr.status, rr.header, rr.body)
	}
	// A slot that frees is taken again.
	open[0].Body.Close()
	open = open[1:]
	waitFor(t, "a free slot", func() bool { return h.svc.numSubscribers() == max-1 })
	resp, err := hc.Get(base + "/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	open = append(open, resp)
	if resp.StatusCode != 200 {
		t.Errorf("watch after a slot freed: %d", resp.StatusCode)
	}
}

// memoryBound is what an aggregator of memNodes nodes may hold in heap
// after it was fed maximal messages: per node what intake's bounds.go lets it keep
// (a bounded update ≈ 180 KB: 128 KiB of detail, 8 summaries of 4 KiB, 64
// teardowns, the reasons) once as the update and once as the view's node,
// the event history (DefaultHistoryBytes), the adopted gone members
// (intake.MaxAdoptedBytes and their nodes), and 32 MiB for the rest of the
// process.
const memNodes = 50

func memoryBound() uint64 {
	return memNodes*2*200<<10 + DefaultHistoryBytes + intake.MaxAdoptedBytes + intake.MaxAdoptedGone*2<<10 + 32<<20
}

// TestMemoryUnderMaximalMessages feeds the Service's intake (the mesh
// Handler) maximal StateUpdates from memNodes nodes, and maximal
// Handovers, while watchers read over real HTTP, for GW_MEM_SECONDS
// (default 5 s; `make bench` runs it for a minute), and checks the heap
// after a collection against memoryBound.
func TestMemoryUnderMaximalMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("feeds maximal messages for seconds")
	}
	d := 5 * time.Second
	if v := getenvDuration(t, "GW_MEM_SECONDS"); v > 0 {
		d = v
	}
	h := newHarness(t)
	base := h.serve(httpapi.ServerOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// The watchers end when their requests are cancelled: cancel first,
	// then wait (two defers would run in the other order and wait for
	// streams that never end).
	defer func() { cancel(); wg.Wait() }()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/watch", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
			}
		}()
	}
	u := maximalUpdate(0)
	wire, err := proto.Marshal(&gwpb.Envelope{Body: &gwpb.Envelope_State{State: u}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a maximal StateUpdate is %d KiB on the wire", len(wire)>>10)
	if len(wire) > mesh.EnvelopeLimit || len(wire) < mesh.EnvelopeLimit*3/4 {
		t.Fatalf("the maximal StateUpdate is %d bytes: want near mesh.EnvelopeLimit (%d)", len(wire), mesh.EnvelopeLimit)
	}
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	msgs := 0
	for seq := uint64(1); time.Since(start) < d; seq++ {
		for i := range memNodes {
			// Each message decoded afresh, as the mesh hands them over.
			env := &gwpb.Envelope{}
			if err := proto.Unmarshal(wire, env); err != nil {
				t.Fatal(err)
			}
			env.GetState().Meta.Seq = seq
			h.svc.HandleMessage(fmt.Sprintf("n%d", i), env)
			msgs++
		}
		if seq%10 == 1 {
			h.svc.HandleMessage("agg-0", &gwpb.Envelope{From: "agg-0", Body: &gwpb.Envelope_Handover{Handover: maximalHandover(seq)}})
		}
		h.sync()
	}
	h.sync()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("%d maximal StateUpdates (%d MiB) and handovers in %v: heap %d → %d MiB (bound %d MiB), %d nodes",
		msgs, msgs*len(wire)>>20, time.Since(start).Round(time.Millisecond), before.HeapAlloc>>20, after.HeapAlloc>>20,
		memoryBound()>>20, len(h.svc.Nodes()))
	if p := os.Getenv("GW_MEM_PROFILE"); p != "" {
		f, _ := os.Create(p)
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	if after.HeapAlloc > memoryBound() {
		t.Errorf("heap %d MiB after maximal input, over the bound %d MiB", after.HeapAlloc>>20, memoryBound()>>20)
	}
}

// maximalHandover is a Handover of intake.MaxHandover gone members, new names
// each time, each with a StateUpdate, within mesh.EnvelopeLimit.
func maximalHandover(round uint64) *gwpb.Handover {
	h := &gwpb.Handover{}
	up := &gwpb.StateUpdate{Meta: downMeta(1, 1, strings.Repeat("r", 200)), Reason: strings.Repeat("r", 200)}
	for i := range intake.MaxHandover {
		h.Gone = append(h.Gone, &gwpb.GoneMember{Name: fmt.Sprintf("ghost%d-%d", round, i), Meta: downMeta(1, 1, "x"), Update: up})
	}
	return h
}

// getenvDuration reads the environment variable name as whole seconds; 0
// when unset.
func getenvDuration(t *testing.T, name string) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want whole seconds", name, v)
	}
	return time.Duration(n) * time.Second
}
