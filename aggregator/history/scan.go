package history

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Scan calls fn for every record whose start lies in [fromMs, toMs), in
// the order they were stored, until fn returns false. The Record and its
// Job are valid during the call only. It is ScanRaw with the strings
// looked up.
func (s *Store) Scan(fromMs, toMs int64, fn func(r *Record) bool) error {
	var rec Record
	return s.ScanRaw(fromMs, toMs, func(r *Raw) bool {
		r.fill(&rec)
		return fn(&rec)
	})
}

// ScanRaw calls fn for every record whose start lies in [fromMs, toMs), in
// the order they were stored, until fn returns false; it reads only the
// segments whose span of starts (kept in memory) meets the window, through
// one buffer, and allocates only for the segments' strings. The Raw is
// valid during the call only. It reads the files without holding the
// writer up: records added during the scan may or may not be seen. A
// segment dropped meanwhile is still read whole (its file stays open) or,
// removed before it was opened, skipped. A segment's damage (found at Open
// or since) ends its reading there, as at Open.
func (s *Store) ScanRaw(fromMs, toMs int64, fn func(r *Raw) bool) error {
	s.mu.Lock()
	if s.cur != nil {
		if err := s.curBuf.Flush(); err != nil {
			s.closeCur()
		}
	}
	type part struct {
		path string
		size int64
	}
	var parts []part
	for _, sg := range s.segs {
		if sg.records == 0 || sg.maxStart < fromMs || sg.minStart >= toMs {
			continue
		}
		parts = append(parts, part{sg.path, sg.size})
	}
	s.mu.Unlock()
	rdr := newReader()
	stop := false
	for i, p := range parts {
		f, err := os.Open(p.path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("history: %w", err)
		}
		_, err = rdr.read(f, p.size, nil, func(r *Raw) bool {
			if r.StartMs >= fromMs && r.StartMs < toMs {
				r.Seg = i
				if !fn(r) {
					stop = true
					return false
				}
			}
			return true
		})
		f.Close()
		if err != nil && !errors.Is(err, errCorrupt) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("history: %s: %w", p.path, err)
		}
		if stop {
			return nil
		}
	}
	return nil
}
