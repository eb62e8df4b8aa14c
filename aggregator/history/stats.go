package history

// Stats is what the store holds and what it refused.
type Stats struct {
	Records  int64
	Bytes    int64
	Segments int
	// OldestStartMs is the start of the oldest record kept; 0 none.
	OldestStartMs int64
	// Corrupt counts the segments found damaged at Open (read up to the
	// damage, never appended to).
	Corrupt int
	// Refused counts the records not stored, by reason.
	Refused map[Refusal]uint64
	// UsersDropped counts the user names dropped for breaking the rule.
	UsersDropped uint64
	// Dropped counts the segments dropped for the bounds, by "bytes" and
	// "age".
	DroppedBytes, DroppedAge uint64
}

// Stats returns what the store holds and what it refused.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Bytes: s.total, Segments: len(s.segs), Corrupt: s.corrupt, Refused: map[Refusal]uint64{},
		UsersDropped: s.users, DroppedBytes: s.dropB, DroppedAge: s.dropA}
	for _, sg := range s.segs {
		st.Records += sg.records
		if sg.minStart != 0 && (st.OldestStartMs == 0 || sg.minStart < st.OldestStartMs) {
			st.OldestStartMs = sg.minStart
		}
	}
	for k, v := range s.refused {
		st.Refused[k] = v
	}
	return st
}
