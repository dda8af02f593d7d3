package split

import (
	"fmt"
)

// Stable allocation (a spec's `split.allocation: stable`).
//
// The hash space has a fixed resolution of Slots slots: a key's slot is
// Hash(key) % Slots, and a slot table says which target owns each slot. A
// table is part of the generation, so every proxy serving it sends a key to
// the same target, and a rollback that restores the table restores every
// key's branch.
//
// Target i owns exactly Counts(weights)[i] slots. A new table is derived
// from the previous one by Rebalance, which moves the fewest slots: each
// target keeps min(old count, new count) of its old slots, so a change of
// weights moves exactly the share of keys whose target must change (the same
// ratios at another total move none; 50/50 -> 75/25 moves 25%, all from the
// shrinking target; adding a target at 10% moves 10%).

// Slots is the number of slots of a stable table.
const Slots = 10_000

// Counts returns the number of slots each target owns for weights (at least
// one positive weight, none negative): round(Slots * w / total) by the
// largest-remainder rule. Each target first gets floor(Slots * w / total);
// the slots left over (fewer than the number of targets) go one each to the
// targets with the largest remainders (Slots * w) mod total, the lower index
// first among equal remainders. The counts always sum to Slots, and a
// weight-0 target gets 0 (its remainder is 0, and there are always more
// targets with a positive remainder than slots left over). It returns nil
// when no weight is positive or one is negative.
func Counts(weights []int) []int {
	var total uint64
	for _, w := range weights {
		if w < 0 {
			return nil
		}
		total += uint64(w)
	}
	if total == 0 {
		return nil
	}
	counts := make([]int, len(weights))
	rems := make([]uint64, len(weights))
	left := Slots
	for i, w := range weights {
		p := uint64(w) * Slots
		counts[i] = int(p / total)
		rems[i] = p % total
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := -1
		for i, r := range rems {
			if r > 0 && (best < 0 || r > rems[best]) {
				best = i
			}
		}
		counts[best]++
		rems[best] = 0
	}
	return counts
}

// Fresh returns the table of weights with no previous table: contiguous runs
// of slots in target order (target 0 owns slots 0..Counts[0]-1, and so on).
// It returns nil for weights Counts refuses.
func Fresh(weights []int) []uint8 {
	counts := Counts(weights)
	if counts == nil {
		return nil
	}
	t := make([]uint8, 0, Slots)
	for i, c := range counts {
		for range c {
			t = append(t, uint8(i))
		}
	}
	return t
}

// Rebalance returns the table of weights derived from old with the fewest
// moved slots. remap maps each target index of old to its index in weights
// (the same upstream), or -1 for a target that is gone; a new target that
// had none is simply not in remap's values. Each target keeps
// min(old count, new count) of the slots it owned in old, its lowest-numbered
// ones; every other slot (the surplus of shrinking targets and the slots of
// removed ones) is freed, and the freed slots, in ascending order, fill the
// growing targets in target order. An old table that is not a valid table
// (wrong length, an index with no entry in remap) gives Fresh(weights).
func Rebalance(old []uint8, remap []int, weights []int) []uint8 {
	counts := Counts(weights)
	if counts == nil {
		return nil
	}
	if len(old) != Slots || len(weights) > MaxTargets {
		return Fresh(weights)
	}
	for _, o := range old {
		if int(o) >= len(remap) {
			return Fresh(weights)
		}
	}
	for _, j := range remap {
		if j >= len(weights) {
			return Fresh(weights)
		}
	}
	t := make([]uint8, Slots)
	const free = 0xff
	var kept [MaxTargets]int
	for s, o := range old {
		j := remap[o]
		if j >= 0 && kept[j] < counts[j] {
			t[s] = uint8(j)
			kept[j]++
		} else {
			t[s] = free
		}
	}
	j := 0
	for s := range t {
		if t[s] != free {
			continue
		}
		for kept[j] >= counts[j] {
			j++
		}
		t[s] = uint8(j)
		kept[j]++
	}
	return t
}

// Moved returns the number of slots whose owner differs between table a
// and table b, owners compared by name: names[i] of a's target i against
// namesB of b's.
func Moved(a []uint8, namesA []string, b []uint8, namesB []string) int {
	n := 0
	for s := range min(len(a), len(b)) {
		if namesA[a[s]] != namesB[b[s]] {
			n++
		}
	}
	return n
}

// CheckTable returns what is wrong with table as the table of weights, or
// nil: it must hold Slots entries, each the index of a target, and each
// target must own exactly Counts(weights) slots.
func CheckTable(table []uint8, weights []int) error {
	counts := Counts(weights)
	if counts == nil {
		return fmt.Errorf("split: weights %v have no positive total", weights)
	}
	if len(table) != Slots {
		return fmt.Errorf("split: the slot table has %d slots, want %d", len(table), Slots)
	}
	var got [256]int
	for _, o := range table {
		got[o]++
	}
	for i := len(weights); i < len(got); i++ {
		if got[i] > 0 {
			return fmt.Errorf("split: the slot table names target %d, but there are %d targets", i, len(weights))
		}
	}
	for i, c := range counts {
		if got[i] != c {
			return fmt.Errorf("split: target %d owns %d slots, want %d (weight %d)", i, got[i], c, weights[i])
		}
	}
	return nil
}

// NewStable compiles weights (as New) with the slot table: the target of a
// key is table[Hash(key) % Slots]. The table must pass CheckTable; it is
// copied. PickExcluding falls back, for a key whose slot's owner is
// excluded, to the walk of New over the remaining targets' weights.
func NewStable(weights []int, table []uint8) (*Split, error) {
	s, err := New(weights)
	if err != nil {
		return nil, err
	}
	if err := CheckTable(table, weights); err != nil {
		return nil, err
	}
	var t [Slots]uint8
	copy(t[:], table)
	s.slots = &t
	return s, nil
}

// Stable reports whether s picks by a slot table.
func (s *Split) Stable() bool { return s.slots != nil }
