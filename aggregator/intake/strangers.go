package intake

// Strangers are the nodes the Service knows but its mesh has not told of:
// the gone members adopted from Handovers, with the bytes each holds
// (bounded by MaxAdoptedGone and MaxAdoptedBytes), and the nodes known
// only from their direct messages (bounded by MaxUnseenNodes). They are
// one goroutine's (the Service's loop).
type Strangers struct {
	adopted      map[string]int
	adoptedBytes int
	unseen       map[string]struct{}
}

// NewStrangers returns no stranger.
func NewStrangers() *Strangers {
	return &Strangers{adopted: map[string]int{}, unseen: map[string]struct{}{}}
}

// Adopt records the nodes adopted from a Handover (AdoptHandover), with
// the bytes each holds.
func (s *Strangers) Adopt(adopted map[string]int) {
	for name, size := range adopted {
		s.adopted[name] = size
		s.adoptedBytes += size
	}
}

// Adopted returns how many gone nodes are adopted, and the bytes they
// hold.
func (s *Strangers) Adopted() (gone, bytes int) { return len(s.adopted), s.adoptedBytes }

// Room returns how many more gone nodes, and bytes, may be adopted.
func (s *Strangers) Room() (gone, bytes int) {
	return MaxAdoptedGone - len(s.adopted), MaxAdoptedBytes - s.adoptedBytes
}

// Unseen records node as known from its direct messages only; false, and
// nothing recorded, when MaxUnseenNodes such nodes are known and bounded.
func (s *Strangers) Unseen(node string, bounded bool) bool {
	if bounded && len(s.unseen) >= MaxUnseenNodes {
		return false
	}
	s.unseen[node] = struct{}{}
	return true
}

// Seen records that the mesh told of name: it is neither adopted from a
// Handover nor known only from its messages any more.
func (s *Strangers) Seen(name string) {
	if size, ok := s.adopted[name]; ok {
		s.adoptedBytes -= size
		delete(s.adopted, name)
	}
	delete(s.unseen, name)
}
