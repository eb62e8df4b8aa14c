package advisor

import (
	"math"
	"time"
)

// durations holds the window's durations in ms, in blocks of 64 Ki (no
// copying as it grows, at most one block unused).
type durations struct {
	blocks [][]uint32
	n      int
}

const durBlock = 1 << 16

func (d *durations) add(v uint32) {
	if d.n%durBlock == 0 {
		d.blocks = append(d.blocks, make([]uint32, 0, durBlock))
	}
	b := &d.blocks[len(d.blocks)-1]
	*b = append(*b, v)
	d.n++
}

// counting is how the records count in the percentiles (see nodeShare): a
// node's records beyond nodeCap count as nodeCap of them spread evenly over
// its own (counts[node] is its records; nil: no node is over the cap), and
// no duration counts as longer than bound (0: none).
type counting struct {
	nodeCap int
	counts  []int
	bound   uint32
}

// thinner decides, in the order of the scan, which records of a node over
// the cap count: the i-th of its c records counts when ⌊(i+1)·C/c⌋ >
// ⌊i·C/c⌋ (C of its c, evenly spread), computed without a product
// (Bresenham's stepping) so that no count overflows. A record past the
// node's c (added to the history since c was counted) does not count.
type thinner struct {
	c          *counting
	step, seen []int
}

func (c *counting) thinner() *thinner {
	return &thinner{c: c, step: make([]int, len(c.counts)), seen: make([]int, len(c.counts))}
}

func (t *thinner) counts(node int32) bool {
	if int(node) >= len(t.c.counts) {
		return false // a node new since
	}
	t.seen[node]++
	n := t.c.counts[node]
	switch {
	case t.seen[node] > n:
		return false
	case n <= t.c.nodeCap:
		return true
	}
	t.step[node] += t.c.nodeCap
	if t.step[node] >= n {
		t.step[node] -= n
		return true
	}
	return false
}

func (c *counting) value(v uint32) uint32 {
	if c.bound > 0 && v > c.bound {
		return c.bound
	}
	return v
}

// distribution computes the exact nearest-rank percentiles (the p-th is
// the ⌈p·n⌉-th smallest) of the durations of d (those that count: see
// acc.thin), none as longer than c's bound, by a two-level radix
// selection: a count of the values by their high 16 bits finds the block
// of 65,536 ms holding each rank, a count of the low 16 bits of the values
// in those blocks (at most four) finds the value. Two passes over d, no
// reordering, no sort: O(n) whatever the values, with 1 MiB of counts.
func distribution(d *durations, c *counting) Distribution {
	n := d.n
	if n == 0 {
		return Distribution{}
	}
	hi := make([]uint32, 1<<16)
	for _, blk := range d.blocks {
		for _, v := range blk {
			hi[c.value(v)>>16]++
		}
	}
	rank := func(p float64) int { return max(int(math.Ceil(p*float64(n))), 1) - 1 }
	ranks := [4]int{rank(0.5), rank(0.99), rank(0.999), n - 1}
	// For each rank: its block, and its rank within the block.
	var block, within [4]int
	for k, r := range ranks {
		seen := 0
		for b, c := range hi {
			if seen+int(c) > r {
				block[k], within[k] = b, r-seen
				break
			}
			seen += int(c)
		}
	}
	// The low halves of the values in the (distinct) blocks found.
	var los [4][]uint32
	slot := [4]int{}
	var blocks []int
	for k := range ranks {
		slot[k] = -1
		for j, b := range blocks {
			if b == block[k] {
				slot[k] = j
			}
		}
		if slot[k] < 0 {
			slot[k] = len(blocks)
			blocks = append(blocks, block[k])
			los[slot[k]] = make([]uint32, 1<<16)
		}
	}
	slotOf := make([]int8, 1<<16) // block → slot + 1; 0 none
	for j, b := range blocks {
		slotOf[b] = int8(j + 1)
	}
	for _, blk := range d.blocks {
		for _, v := range blk {
			v = c.value(v)
			if k := slotOf[v>>16]; k > 0 {
				los[k-1][v&0xffff]++
			}
		}
	}
	var vals [4]time.Duration
	for k := range ranks {
		seen := 0
		for lo, cnt := range los[slot[k]] {
			if seen+int(cnt) > within[k] {
				vals[k] = ms(int64(block[k])<<16 | int64(lo))
				break
			}
			seen += int(cnt)
		}
	}
	return Distribution{Count: n, P50: vals[0], P99: vals[1], P999: vals[2], Max: vals[3]}
}
