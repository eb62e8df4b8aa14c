// Package reach keeps where the nodes are reached, across a crash of the
// aggregator.
//
// Each agent names its own mesh address in its signed updates, and the
// aggregator reaches the node there, not where gossip alone says
// (mesh/reach.go). A Book also keeps those addresses under state_dir (the
// file "reach": one "name address" line per node, rewritten at most every
// SaveEvery). An aggregator that starts after a crash (no signed leave:
// the agents may not see that it is a new process until they probe it, a
// probe round of their member table, and with a table full of invented
// members that is hours) asks every node of that file at once, at its
// proven address, with the same signed probe that asks before it accuses
// (package aggregator/probe): each agent answers with its whole state, and
// with node restriction every node is served again within a few round
// trips, whatever memberlist's tables hold. A node that does not answer is
// not accused for it: it enters the view when it speaks, as before.
//
// The package knows neither the mesh nor its wire types
// (TestImportsNoWireTypes): the Service hands it names and addresses.
package reach

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gracewatch/gracewatch/internal/clock"
	"github.com/gracewatch/gracewatch/internal/fsutil"
	"github.com/gracewatch/gracewatch/internal/nodename"
	"github.com/gracewatch/gracewatch/internal/ratelog"
)

const (
	// FileName is the file under state_dir.
	FileName = "reach"
	// SaveEvery spaces the rewrites of the file (a few hundred KB at
	// 10,000 nodes, rewritten only when a node is new or moved): a node
	// that is new or moved within it before a crash is not asked at once
	// (it is heard when it speaks, or when its agent sees the new
	// process).
	SaveEvery = 2 * time.Second
	// MaxNodes bounds the nodes kept (as mesh/reach.go does).
	MaxNodes = 1 << 16
	// maxFileBytes bounds what is read of the file: MaxNodes lines of a
	// maximal name and address.
	maxFileBytes = MaxNodes * (253 + 1 + 47 + 1)
	// saveLogEvery spaces the lines of failed saves.
	saveLogEvery = time.Minute
)

// Book is the nodes' proven addresses as the file keeps them. Safe for
// concurrent use; no method blocks on the disk but Open (the saves run on
// goroutines of their own).
type Book struct {
	path    string // "" without state_dir
	clock   clock.Clock
	log     *slog.Logger
	saveLog *ratelog.Limiter

	mu      sync.Mutex
	addrs   map[string]string
	dirty   bool
	saving  bool // a save is armed or running
	savedAt time.Time
	// loaded are the nodes of the file at the start: to ask once the
	// Service has the mesh (TakeLoaded).
	loaded map[string]string
}

// Open reads dir's reach file (a missing one is an empty book; an empty
// dir keeps the book in memory only). A line that is not a node name and
// an address is skipped, and counted in the returned error (for the
// caller to log; the book returned holds the rest). Failed saves are
// logged to log, at most once every minute.
func Open(dir string, clk clock.Clock, log *slog.Logger) (*Book, error) {
	b := &Book{clock: clk, log: log, saveLog: ratelog.New(saveLogEvery), addrs: map[string]string{}, loaded: map[string]string{}}
	if dir == "" {
		return b, nil
	}
	b.path = filepath.Join(dir, FileName)
	f, err := os.Open(b.path)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return b, fmt.Errorf("read %s: %w", b.path, err)
	}
	defer f.Close()
	bad, first := 0, ""
	sc := bufio.NewScanner(io.LimitReader(f, maxFileBytes))
	for line := 1; sc.Scan(); line++ {
		name, addr, ok := strings.Cut(sc.Text(), " ")
		err := nodename.Validate(name)
		if ok && err == nil {
			_, err = netip.ParseAddrPort(addr)
		} else if err == nil {
			err = errors.New("want a node name and an address")
		}
		if err != nil || len(b.addrs) >= MaxNodes {
			if bad++; first == "" {
				first = fmt.Sprintf("line %d: %v", line, err)
			}
			continue
		}
		b.addrs[name] = addr
	}
	maps.Copy(b.loaded, b.addrs)
	switch {
	case sc.Err() != nil:
		return b, fmt.Errorf("read %s: %w (%d nodes read)", b.path, sc.Err(), len(b.addrs))
	case bad > 0:
		return b, fmt.Errorf("%s: %d lines skipped (%s)", b.path, bad, first)
	}
	return b, nil
}

// Path is the book's file; empty without a state dir.
func (b *Book) Path() string { return b.path }

// TakeLoaded returns the nodes of the file read at the start, with their
// addresses, once: later calls return nothing.
func (b *Book) TakeLoaded() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	loaded := b.loaded
	b.loaded = nil
	return loaded
}

// Set records node's address and, when it changed, saves the book (see
// save).
func (b *Book) Set(node, addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if old, ok := b.addrs[node]; ok && old == addr {
		return
	} else if !ok && len(b.addrs) >= MaxNodes {
		return
	}
	b.addrs[node] = addr
	b.dirty = true
	b.saveLocked()
}

// Forget drops node and, when it was kept, saves the book.
func (b *Book) Forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.addrs[node]; !ok {
		return
	}
	delete(b.addrs, node)
	b.dirty = true
	b.saveLocked()
}

// encodeLocked is the file's content, sorted by name.
func (b *Book) encodeLocked() []byte {
	var buf bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(b.addrs)) {
		fmt.Fprintf(&buf, "%s %s\n", name, b.addrs[name])
	}
	return buf.Bytes()
}

// saveLocked writes the book now, or arms a save SaveEvery after the last
// one; b.mu is held. The write runs on a goroutine of its own (never on
// the caller's).
func (b *Book) saveLocked() {
	if b.path == "" || b.saving || !b.dirty {
		return
	}
	b.saving = true
	wait := max(b.savedAt.Add(SaveEvery).Sub(b.clock.Now()), 0)
	b.clock.AfterFunc(wait, func() {
		b.mu.Lock()
		data := b.encodeLocked()
		b.dirty = false
		b.mu.Unlock()
		err := fsutil.WriteFileAtomic(b.path, data, 0o600, "."+FileName+".*")
		b.mu.Lock()
		b.saving, b.savedAt = false, b.clock.Now()
		if err != nil {
			b.dirty = true
		} else {
			b.saveLocked() // what changed during the write
		}
		b.mu.Unlock()
		if err != nil {
			if ok, _ := b.saveLog.Allow("save", b.clock.Now()); ok {
				b.log.Error("cannot save where the nodes are reached: a restart asks only the nodes that speak first", "err", err)
			}
		}
	})
}
