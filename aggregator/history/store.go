package history

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/opt"
)

// Defaults of Options (docs/DESIGN.md §5d says why).
const (
	// DefaultMaxBytes bounds the files: 1 GiB holds about 22 million
	// teardowns (47 bytes each), 90 days of a 10,000-node cluster that
	// ends a job per node every hour.
	DefaultMaxBytes = 1 << 30
	// DefaultMaxAge: a quarter, long enough to see a file system's bad
	// weeks and a maintenance's effect, short enough that the advice
	// follows the site's present.
	DefaultMaxAge = 90 * 24 * time.Hour
	// DefaultNodeRate and DefaultNodeBurst bound the records one node
	// adds: a token bucket of DefaultNodeBurst refilled at DefaultNodeRate
	// per second. One a second sustained is far above a node's real jobs
	// (even high-throughput Flux runs a few per node a minute) and keeps a
	// broken or hostile node to 86,400 records (4 MB) a day; the burst
	// takes an agent's resend of its last 64 after a restart, many times.
	DefaultNodeRate  = 1.0
	DefaultNodeBurst = 600
	// MinMaxBytes is the smallest MaxBytes: a few segments.
	MinMaxBytes = 1 << 20
	// dedupeDepth is how many of a node's latest records are remembered
	// to refuse a resend (the agent resends its last 64 released
	// teardowns in every update: twice that).
	dedupeDepth = 128
	// syncEvery spaces the fsyncs: what a crash loses since the last one
	// is resent by the agents (their last 64 releases) and the torn tail
	// is truncated at the next start.
	syncEvery = 5 * time.Second
	// maxSegments bounds the segment files (the rotation by age and size
	// makes about 32).
	maxSegments = 64
	// segmentSuffix names segment files: 16 decimal digits of a sequence.
	segmentSuffix = ".seg"
)

// Options configure a Store.
type Options struct {
	// Dir holds the segment files; created if missing.
	Dir string
	// MaxBytes bounds the segment files' total size; 0: DefaultMaxBytes.
	MaxBytes int64
	// MaxAge: a segment whose newest record started longer ago is
	// dropped; 0: DefaultMaxAge.
	MaxAge time.Duration
	// NodeRate and NodeBurst bound each node's records (a token bucket);
	// 0: the defaults.
	NodeRate  float64
	NodeBurst int
	// Logger receives the store's events; nil discards them.
	Logger *slog.Logger
}

// segment is one file's metadata.
type segment struct {
	seq      uint64
	path     string
	size     int64 // bytes of whole valid frames (what is read)
	records  int64
	minStart int64 // 0: no record
	maxStart int64
	// firstStart is the start of its first record: a segment rotates once
	// a record starts segmentAge after it.
	firstStart int64
	corrupt    string // why reading stopped early; "" whole
}

// nodeState is what the store keeps of one node: its latest records' keys
// (a ring) and its rate bucket.
type nodeState struct {
	keys   [dedupeDepth]uint64
	next   int
	tokens float64
	last   time.Time
}

// Store is the history. Add, Flush and Close are for one writer (the
// aggregator's loop); Scan, ScanRaw and Stats may run concurrently with it
// and with each other. Its memory does not grow with the records: per
// segment file its metadata (about 100 bytes, at most maxSegments), per
// node its dedupe ring and rate bucket (about 1 KiB), and the current
// segment's string ids; a scan adds one read buffer and the string table
// of the segment it reads.
type Store struct {
	o   Options
	log *slog.Logger

	mu       sync.Mutex
	segs     []*segment // oldest first; the last is cur's when cur is open
	total    int64
	cur      *os.File
	curBuf   *bufio.Writer
	curStrs  map[string]uint32
	nextSeq  uint64
	lastSync time.Time
	dirty    bool
	nodes    map[string]*nodeState
	refused  map[Refusal]uint64
	users    uint64
	dropB    uint64
	dropA    uint64
	corrupt  int
	frame    []byte
}

// segmentBytes is the size at which a segment rotates: 1/32 of the bound,
// 1 MiB to 64 MiB.
func (s *Store) segmentBytes() int64 { return min(max(s.o.MaxBytes/32, 256<<10), 64<<20) }

// segmentAge is the span of starts at which a segment rotates: a record
// that starts this long after the segment's first one starts a new
// segment (1/32 of MaxAge, so a segment is dropped by age at most that
// late). A record that starts before it (a teardown released after days
// of hanging, a node's late resend) joins the current segment: rotating
// for it would cost two segments each time and, at maxSegments, drop the
// oldest history for nothing. It is kept until the segment's newest start
// passes MaxAge.
func (s *Store) segmentAge() time.Duration { return s.o.MaxAge / 32 }

// Open opens (or creates) the history in o.Dir: it reads every segment,
// truncates a torn tail of the last one (a crash during a write), reports
// and skips a damaged one (it is kept, read up to the damage, never
// appended to), and drops what is past the bounds at now. It refuses to
// start only when the directory cannot be used.
func Open(o Options, now time.Time) (*Store, error) {
	opt.Default(&o.MaxBytes, DefaultMaxBytes)
	o.MaxBytes = max(o.MaxBytes, MinMaxBytes)
	opt.Default(&o.MaxAge, DefaultMaxAge)
	opt.Default(&o.NodeRate, DefaultNodeRate)
	opt.Default(&o.NodeBurst, DefaultNodeBurst)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(o.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	s := &Store{o: o, log: o.Logger.With("component", "history"), nodes: map[string]*nodeState{}, refused: map[Refusal]uint64{}, nextSeq: 1}
	ents, err := os.ReadDir(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		num, ok := strings.CutSuffix(name, segmentSuffix)
		seq, err := strconv.ParseUint(num, 10, 64)
		if !ok || err != nil || !e.Type().IsRegular() {
			continue
		}
		s.segs = append(s.segs, &segment{seq: seq, path: filepath.Join(o.Dir, name)})
		s.nextSeq = max(s.nextSeq, seq+1)
	}
	slices.SortFunc(s.segs, func(a, b *segment) int { return cmp.Compare(a.seq, b.seq) })
	rdr := newReader()
	for i, sg := range s.segs {
		s.load(rdr, sg, i == len(s.segs)-1)
		s.total += sg.size
	}
	s.dropOld(now)
	return s, nil
}

// load reads sg's records into its metadata and the nodes' dedupe rings.
// A damaged last segment whose damage is within a frame of its end is a
// torn write: it is truncated there, and appended to again no more (a new
// segment starts). Any other damage is reported and the segment kept, read
// up to it.
func (s *Store) load(rdr *reader, sg *segment, last bool) {
	f, err := os.Open(sg.path)
	if err != nil {
		sg.corrupt = err.Error()
		s.corrupt++
		s.log.Error("history segment cannot be read: skipped, the others are kept", "file", sg.path, "err", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		sg.corrupt = err.Error()
		s.corrupt++
		return
	}
	d := &decoder{}
	n, rerr := rdr.read(f, fi.Size(), d, func(r *Raw) bool {
		sg.note(r.StartMs)
		s.remember(s.node(r.Str(r.Node)), key(r.Job, r.StartMs))
		return true
	})
	sg.size = n
	if rerr == nil {
		if last {
			s.reopen(sg, d)
		}
		return
	}
	torn := last && errors.Is(rerr, errCorrupt) && tornTail(f, n, fi.Size())
	if torn && n >= int64(headerSize) {
		if err := os.Truncate(sg.path, n); err != nil {
			s.log.Error("history: cannot truncate the torn tail of the last segment", "file", sg.path, "err", err)
		} else {
			s.log.Warn("history: torn tail of the last segment truncated (a crash during a write); the agents resend what it held",
				"file", sg.path, "kept_bytes", n, "dropped_bytes", fi.Size()-n)
			s.reopen(sg, d)
		}
		return
	}
	if torn && n < int64(headerSize) {
		// Created, header not written whole: an empty segment.
		sg.size = 0
		os.Remove(sg.path)
		s.log.Warn("history: empty torn segment removed", "file", sg.path)
		return
	}
	sg.corrupt = rerr.Error()
	s.corrupt++
	s.log.Error("history segment damaged: its records up to the damage are kept, the rest of it is skipped; the other segments are whole",
		"file", sg.path, "err", rerr, "records_kept", sg.records)
}

// tornTail reports whether the bytes of f from n to size are what a crash
// during an append leaves: less than a frame, or zeros (blocks allocated,
// never written).
func tornTail(f *os.File, n, size int64) bool {
	if size-n < maxFrameSize {
		return true
	}
	buf := make([]byte, 64<<10)
	for off := n; off < size; {
		k, err := f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		for _, c := range buf[:k] {
			if c != 0 {
				return false
			}
		}
		off += int64(k)
		if err != nil {
			return off >= size
		}
	}
	return true
}

// reopen makes the whole (or truncated) last segment sg the current one
// again, its strings those d read: a restart appends where the last run
// stopped rather than starting a segment of its own.
func (s *Store) reopen(sg *segment, d *decoder) {
	if d == nil || sg.size < int64(headerSize) {
		return
	}
	f, err := os.OpenFile(sg.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		s.log.Warn("history: cannot append to the last segment: a new one starts", "file", sg.path, "err", err)
		return
	}
	s.cur, s.curBuf, s.curStrs = f, bufio.NewWriterSize(f, 64<<10), make(map[string]uint32, len(d.strs))
	for i, str := range d.strs {
		s.curStrs[str] = uint32(i + 1)
	}
}

// last returns the newest segment.
func (s *Store) last() *segment {
	if len(s.segs) == 0 {
		return nil
	}
	return s.segs[len(s.segs)-1]
}

// note adds a record that started at startMs to sg's metadata.
func (sg *segment) note(startMs int64) {
	if sg.records == 0 {
		sg.firstStart = startMs
	}
	sg.records++
	if sg.minStart == 0 || startMs < sg.minStart {
		sg.minStart = startMs
	}
	sg.maxStart = max(sg.maxStart, startMs)
}

// key is a record's identity within its node: its job and start (an agent
// resends a released teardown with the same three). FNV-1a of the job's
// bytes and the start's 8 little-endian bytes.
func key(job []byte, startMs int64) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, c := range job {
		h = (h ^ uint64(c)) * prime
	}
	for i := range 8 {
		h = (h ^ uint64(byte(startMs>>(8*i)))) * prime
	}
	return h | 1 // 0 is an empty slot
}

func (s *Store) node(name string) *nodeState {
	ns := s.nodes[name]
	if ns == nil {
		ns = &nodeState{tokens: float64(s.o.NodeBurst)}
		s.nodes[name] = ns
	}
	return ns
}

func (s *Store) remember(ns *nodeState, k uint64) {
	ns.keys[ns.next] = k
	ns.next = (ns.next + 1) % dedupeDepth
}

func (ns *nodeState) has(k uint64) bool { return slices.Contains(ns.keys[:], k) }

// Add stores r (cleaned by Clean) at now, unless it is a duplicate, over
// its node's rate, implausible (its release before its start, more than
// MaxAhead after now), too old for the age bound, past the bounds (a grace
// past MaxGraceMs, a self-ended teardown longer than MaxDurationMs), or
// invalid: then it returns why (and counts it). It returns "" when stored;
// a teardown not self-ended and longer than MaxDurationMs is stored as that
// long. The bytes are written by Flush.
func (s *Store) Add(r Record, now time.Time) Refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	why := s.add(r, now)
	if why != "" {
		s.refused[why]++
	}
	return why
}

func (s *Store) add(r Record, now time.Time) Refusal {
	r, userDropped, err := Clean(r)
	switch {
	case errors.Is(err, errBounds):
		return RefusedBounds
	case err != nil:
		return RefusedInvalid
	case r.ReleasedMs < r.StartMs:
		return RefusedClock
	case r.ReleasedMs > now.Add(MaxAhead).UnixMilli():
		return RefusedFuture
	case r.StartMs < now.Add(-s.o.MaxAge).UnixMilli():
		return RefusedOld
	}
	// Both ends are positive and in order: the difference cannot wrap.
	if r.ReleasedMs-r.StartMs > MaxDurationMs {
		if r.Outcome.SelfEnded() {
			return RefusedBounds
		}
		r.ReleasedMs = r.StartMs + MaxDurationMs // a lower bound, as a signalled one's length is
	}
	ns := s.node(r.Node)
	k := key(r.Job, r.StartMs)
	if ns.has(k) {
		return RefusedDuplicate
	}
	if !ns.last.IsZero() {
		ns.tokens = min(float64(s.o.NodeBurst), ns.tokens+now.Sub(ns.last).Seconds()*s.o.NodeRate)
	}
	ns.last = now
	if ns.tokens < 1 {
		return RefusedRate
	}
	if err := s.write(&r, now); err != nil {
		if ok, _ := writeLog.allow(now); ok {
			s.log.Error("history: cannot write a record: it is lost (the aggregator serves on)", "err", err)
		}
		return RefusedWrite
	}
	ns.tokens--
	s.remember(ns, k)
	if userDropped {
		s.users++
	}
	return ""
}

// writeLog spaces the log lines of write errors.
var writeLog = &every{d: time.Minute}

type every struct {
	mu   sync.Mutex
	d    time.Duration
	last time.Time
}

func (e *every) allow(now time.Time) (bool, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if now.Sub(e.last) < e.d {
		return false, e.last
	}
	e.last = now
	return true, now
}

// write appends r's frames to the current segment, rotating and dropping
// segments first as the bounds require.
func (s *Store) write(r *Record, now time.Time) error {
	if sg := s.last(); s.cur != nil && sg != nil && (sg.size >= s.segmentBytes() ||
		(sg.records > 0 && r.StartMs-sg.firstStart >= s.segmentAge().Milliseconds()) || len(s.curStrs) > maxStringsPerSegment-8) {
		s.closeCur()
	}
	s.dropOld(now)
	if s.cur == nil {
		if err := s.create(now); err != nil {
			return err
		}
	}
	sg := s.segs[len(s.segs)-1]
	b := s.frame[:0]
	var id ids
	for _, v := range [...]struct {
		str string
		id  *uint32
	}{{r.Node, &id.node}, {r.User, &id.user}, {r.Command, &id.command}, {r.Cause, &id.cause}} {
		if v.str == "" {
			continue
		}
		n, ok := s.curStrs[v.str]
		if !ok {
			// Defined from here on: a failed write closes the segment
			// (and its strings) below.
			n = uint32(len(s.curStrs) + 1)
			s.curStrs[v.str] = n
			b = appendFrame(b, kindString, []byte(v.str))
		}
		*v.id = n
	}
	b = appendRecord(b, r, id)
	s.frame = b
	// Keep the total within MaxBytes: drop the oldest segments (never
	// the current one: it is at most 1/32 of the bound).
	for s.total+int64(len(b)) > s.o.MaxBytes && len(s.segs) > 1 {
		s.dropFirst("bytes")
	}
	if _, err := s.curBuf.Write(b); err != nil {
		s.closeCur()
		return err
	}
	sg.size += int64(len(b))
	s.total += int64(len(b))
	sg.note(r.StartMs)
	s.dirty = true
	return nil
}

// create starts a new segment.
func (s *Store) create(now time.Time) error {
	if len(s.segs) >= maxSegments {
		s.dropFirst("bytes")
	}
	path := filepath.Join(s.o.Dir, fmt.Sprintf("%016d%s", s.nextSeq, segmentSuffix))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if _, err := f.Write([]byte(magic)); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("history: %s: %w", path, err)
	}
	syncDir(s.o.Dir)
	s.segs = append(s.segs, &segment{seq: s.nextSeq, path: path, size: int64(headerSize)})
	s.total += int64(headerSize)
	s.nextSeq++
	s.cur, s.curBuf, s.curStrs = f, bufio.NewWriterSize(f, 64<<10), map[string]uint32{}
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// closeCur flushes, syncs and closes the current segment; the next record
// starts a new one.
func (s *Store) closeCur() {
	if s.cur == nil {
		return
	}
	if err := s.curBuf.Flush(); err != nil {
		s.log.Error("history: flushing a segment", "err", err)
		// What the file holds is less than counted: read it again.
		if fi, err := s.cur.Stat(); err == nil {
			sg := s.segs[len(s.segs)-1]
			s.total += fi.Size() - sg.size
			sg.size = fi.Size()
		}
	}
	s.cur.Sync()
	s.cur.Close()
	s.cur, s.curBuf, s.curStrs = nil, nil, nil
}

// dropOld drops the segments past the age bound, oldest first.
func (s *Store) dropOld(now time.Time) {
	cutoff := now.Add(-s.o.MaxAge).UnixMilli()
	for len(s.segs) > 0 {
		sg := s.segs[0]
		if sg.records > 0 && sg.maxStart >= cutoff {
			return
		}
		if len(s.segs) == 1 && s.cur != nil {
			if sg.records == 0 {
				return // the current one, new
			}
			s.closeCur() // the current one, all past the bound: a new one starts
		}
		s.dropFirst("age")
	}
}

// dropFirst removes the oldest segment.
func (s *Store) dropFirst(why string) {
	sg := s.segs[0]
	if err := os.Remove(sg.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("history: cannot remove a segment past the bound", "file", sg.path, "err", err)
	}
	s.total -= sg.size
	s.segs = s.segs[1:]
	if why == "age" {
		s.dropA++
	} else {
		s.dropB++
	}
	s.log.Info("history: oldest segment dropped", "why", why, "file", filepath.Base(sg.path), "records", sg.records)
}

// Flush writes what Add buffered and, at most every syncEvery, syncs it.
func (s *Store) Flush(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.flush(now)
}

func (s *Store) flush(now time.Time) error {
	if s.cur == nil || !s.dirty {
		return nil
	}
	if err := s.curBuf.Flush(); err != nil {
		s.closeCur()
		return fmt.Errorf("history: %w", err)
	}
	if now.Sub(s.lastSync) >= syncEvery {
		s.lastSync = now
		s.dirty = false
		if err := s.cur.Sync(); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	}
	return nil
}

// Close flushes, syncs and closes the store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.cur != nil {
		err = s.curBuf.Flush()
	}
	s.closeCur()
	return err
}

// ErrOff answers a question to the history when it is off (the
// aggregator has no state_dir or history.dir).
var ErrOff = errors.New("the teardown history is off: set state_dir or history.dir")
