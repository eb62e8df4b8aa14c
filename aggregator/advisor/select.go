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

// distribution computes the exact nearest-rank percentiles of d (the p-th
// is the ⌈p·n⌉-th smallest) by a two-level radix selection: a count of
// the values by their high 16 bits finds the block of 65,536 ms holding
// each rank, a count of the low 16 bits of the values in those blocks (at
// most four) finds the value. Two passes over d, no reordering, no sort:
// O(n) whatever the values, with 1 MiB of counts.
func distribution(d *durations) Distribution {
	n := d.n
	if n == 0 {
		return Distribution{}
	}
	rank := func(p float64) int { return max(int(math.Ceil(p*float64(n))), 1) - 1 }
	ranks := [4]int{rank(0.5), rank(0.99), rank(0.999), n - 1}
	hi := make([]uint32, 1<<16)
	for _, blk := range d.blocks {
		for _, v := range blk {
			hi[v>>16]++
		}
	}
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
			if j := slotOf[v>>16]; j > 0 {
				los[j-1][v&0xffff]++
			}
		}
	}
	var vals [4]time.Duration
	for k := range ranks {
		seen := 0
		for lo, c := range los[slot[k]] {
			if seen+int(c) > within[k] {
				vals[k] = ms(int64(block[k])<<16 | int64(lo))
				break
			}
			seen += int(c)
		}
	}
	return Distribution{Count: n, P50: vals[0], P99: vals[1], P999: vals[2], Max: vals[3]}
}
