package config

import (
	"fmt"

	"github.com/dwara/dwara/gateway/split"
)

// The slot table of a stable split (Split.Allocation == AllocationStable) is
// stored in the spec as Split.Slots, a run-length encoding: a list of
// [target index, run length] pairs which, read in order, give the owners of
// slots 0, 1, ... split.Slots-1. The encoding is canonical: every run is at
// least 1 long, two adjacent runs never name the same target, and the runs
// sum to split.Slots; so equal tables encode to equal JSON. A fresh 2-target
// table at 95/5 is [[0,9500],[1,500]].
//
// Target i must own exactly split.Counts(weights)[i] slots: round(10000 *
// weight / total) by the largest-remainder rule, so the counts always sum to
// 10000 and a weight-0 target owns none.

// Stable reports whether sp picks by a slot table.
func (sp *Split) Stable() bool { return sp != nil && sp.Allocation == AllocationStable }

// EncodeSlots run-length encodes a slot table (see Split.Slots).
func EncodeSlots(table []uint8) [][]int {
	var runs [][]int
	for i := 0; i < len(table); {
		j := i
		for j < len(table) && table[j] == table[i] {
			j++
		}
		runs = append(runs, []int{int(table[i]), j - i})
		i = j
	}
	return runs
}

// DecodeSlots decodes the run-length encoding of a table of n targets; it
// refuses anything but a canonical encoding of split.Slots slots whose
// indexes are below n. It does not check the counts (see split.CheckTable).
func DecodeSlots(runs [][]int, n int) ([]uint8, error) {
	table := make([]uint8, 0, split.Slots)
	for i, r := range runs {
		switch {
		case len(r) != 2:
			return nil, fmt.Errorf("run %d: must be a [target index, run length] pair, got %d numbers", i, len(r))
		case r[0] < 0 || r[0] >= n:
			return nil, fmt.Errorf("run %d: target index must be 0..%d (the split has %d targets), got %d", i, n-1, n, r[0])
		case r[1] < 1:
			return nil, fmt.Errorf("run %d: run length must be at least 1, got %d", i, r[1])
		case r[1] > split.Slots-len(table):
			return nil, fmt.Errorf("run %d: the runs cover more than %d slots", i, split.Slots)
		case i > 0 && runs[i-1][0] == r[0]:
			return nil, fmt.Errorf("run %d: same target %d as the run before; merge them", i, r[0])
		}
		for range r[1] {
			table = append(table, uint8(r[0]))
		}
	}
	if len(table) != split.Slots {
		return nil, fmt.Errorf("the runs cover %d slots, want %d", len(table), split.Slots)
	}
	return table, nil
}

// Table returns the slot table of a stable split: its Slots decoded when
// they are a valid table of its weights, else the fresh table
// (split.Fresh) of its weights. It returns nil for a hash split or weights
// with no positive total.
func (sp *Split) Table() []uint8 {
	if !sp.Stable() {
		return nil
	}
	w := splitWeights(sp.Targets)
	if sp.Slots != nil {
		if t, err := DecodeSlots(sp.Slots, len(sp.Targets)); err == nil && split.CheckTable(t, w) == nil {
			return t
		}
	}
	return split.Fresh(w)
}

func splitWeights(ts []Target) []int {
	w := make([]int, len(ts))
	for i, t := range ts {
		w[i] = max(t.Weight, 0)
	}
	return w
}

// Allocate computes the slot table of every stable split of next from the
// generation it follows, parent (nil for none): a service whose namesake in
// parent is a stable split gets the table split.Rebalance derives from the
// parent's table (targets matched by upstream name, so adding, removing or
// reordering targets moves only what it must); any other stable split gets
// the fresh table of its weights. Whatever Slots next carried is replaced,
// and the Slots of a hash split are removed. It modifies next in place.
// The API calls it on every generation it stores except a rollback, which
// stores the source generation's tables unchanged.
func Allocate(parent, next *Spec) {
	if next == nil {
		return
	}
	for i := range next.Services {
		svc := &next.Services[i]
		var old *Service
		if parent != nil {
			old, _ = parent.Service(svc.Name)
		}
		reallocate(old, svc)
	}
}

// reallocate computes svc's table from old, its previous version (nil for
// none); see Allocate.
func reallocate(old, svc *Service) {
	sp := svc.Split
	if sp == nil {
		return
	}
	if !sp.Stable() {
		sp.Slots = nil
		return
	}
	w := splitWeights(sp.Targets)
	if split.Counts(w) == nil || len(sp.Targets) > split.MaxTargets {
		sp.Slots = nil // invalid weights: validation reports them
		return
	}
	var table []uint8
	if old != nil && old.Split.Stable() {
		if prev := old.Split.Table(); prev != nil {
			remap := make([]int, len(old.Split.Targets))
			for i, ot := range old.Split.Targets {
				remap[i] = -1
				for j, nt := range sp.Targets {
					if nt.Upstream == ot.Upstream {
						remap[i] = j
						break
					}
				}
			}
			table = split.Rebalance(prev, remap, w)
		}
	}
	if table == nil {
		table = split.Fresh(w)
	}
	sp.Slots = EncodeSlots(table)
}

// DropSlots removes the computed slot table of every split of s.
func DropSlots(s *Spec) {
	if s == nil {
		return
	}
	for i := range s.Services {
		if sp := s.Services[i].Split; sp != nil {
			sp.Slots = nil
		}
	}
}

// slotsDisplacement returns the share of keys whose upstream differs
// between the tables of two stable splits: moved slots / split.Slots.
func slotsDisplacement(a, b *Split) float64 {
	ta, tb := a.Table(), b.Table()
	if ta == nil || tb == nil {
		if ta == nil && tb == nil {
			return 0
		}
		return 1
	}
	return float64(split.Moved(ta, upstreamNames(a.Targets), tb, upstreamNames(b.Targets))) / split.Slots
}

func upstreamNames(ts []Target) []string {
	n := make([]string, len(ts))
	for i, t := range ts {
		n[i] = t.Upstream
	}
	return n
}
