package view

// Texts cut to their bound.

import (
	"fmt"
	"strings"
)

// CutMarker ends a text cut to its bound; the number is the original
// length.
const CutMarker = "… [cut: %d bytes]"

// CutText returns s cut to at most max bytes, on a UTF-8 boundary, with
// CutMarker, or s itself when it fits.
func CutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf(CutMarker, len(s))
	keep := max - len(marker)
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && keep < len(s) && !isRuneStart(s[keep]) {
		keep--
	}
	return strings.ToValidUTF8(s[:keep], "") + marker
}

func isRuneStart(b byte) bool { return b&0xc0 != 0x80 }

const (
	// MaxUpdateReasonBytes bounds a StateUpdate's reason. The agent cuts
	// its latched reason at 1 KiB (agent/teardown/latch.go); 4 KiB leaves
	// room for a newer agent's and keeps 10,000 nodes' reasons within
	// 40 MB. Slurm shows the reason on one line of sinfo.
	MaxUpdateReasonBytes = 4 << 10
)
