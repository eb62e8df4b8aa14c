package hangfs

import "strconv"

// AbortThroughPrivateFusectl aborts the connection of s as Stop does where
// fusectl is not mounted, whether it is or not.
func AbortThroughPrivateFusectl(s *Server) error {
	return abortConnPrivate(strconv.FormatUint(uint64(s.minor), 10))
}
