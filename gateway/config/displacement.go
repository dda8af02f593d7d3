package config

import "github.com/dwara/dwara/gateway/split"

// exactSlots bounds the number of residues Displacement enumerates when two
// weightings have different totals; beyond it the share is measured over a
// fixed key sample.
const exactSlots = 1 << 22

// sampleKeys is the size of the fixed key sample used past exactSlots.
const sampleKeys = 1 << 18

// Displacement returns the share of request keys, in [0, 1], whose target
// changes upstream between the weighting a and the weighting b of one
// service, as the split package picks them. Targets are matched by their
// Upstream name; a target of weight 0 or less owns no key.
//
// With equal totals the answer is exact: the share of slots whose owner
// changed. With different totals, hashes are assumed uniform and the share is
// computed exactly over one period lcm(total a, total b) when that is at most
// 4 Mi slots; otherwise it is measured over a fixed set of 256 Ki keys hashed
// with split.Hash (accurate to about ±0.3 percentage points at 99.9%
// confidence). An empty or zero-weight side counts every key as moved, unless
// both are. Displacement only reads a and b.
func Displacement(a, b []Target) float64 {
	ta, tb := positiveTotal(a), positiveTotal(b)
	if ta == 0 || tb == 0 {
		if ta == tb {
			return 0
		}
		return 1
	}
	if ta == tb {
		return float64(movedSlots(a, b, ta)) / float64(ta)
	}
	if l := lcm(ta, tb); l <= exactSlots {
		var moved uint64
		for r := uint64(0); r < l; r++ {
			if slotOwner(a, r%ta) != slotOwner(b, r%tb) {
				moved++
			}
		}
		return float64(moved) / float64(l)
	}
	var moved int
	var key [8]byte
	for i := 0; i < sampleKeys; i++ {
		for j := range key {
			key[j] = byte(uint64(i) >> (8 * j))
		}
		h := split.Hash(string(key[:]))
		if slotOwner(a, h%ta) != slotOwner(b, h%tb) {
			moved++
		}
	}
	return float64(moved) / float64(sampleKeys)
}

// positiveTotal sums the positive weights of ts.
func positiveTotal(ts []Target) uint64 {
	var t uint64
	for _, tg := range ts {
		if tg.Weight > 0 {
			t += uint64(tg.Weight)
		}
	}
	return t
}

// slotOwner returns the upstream of the target that owns slot.
func slotOwner(ts []Target, slot uint64) string {
	var cum uint64
	for _, tg := range ts {
		if tg.Weight <= 0 {
			continue
		}
		cum += uint64(tg.Weight)
		if slot < cum {
			return tg.Upstream
		}
	}
	return ""
}

// movedSlots counts slots in [0, t) whose owner differs, by merging the two
// cumulative walks interval by interval.
func movedSlots(a, b []Target, t uint64) uint64 {
	var moved, pos uint64
	ia, ib := 0, 0
	var enda, endb uint64
	advance := func(ts []Target, i *int, end *uint64) {
		for *i < len(ts) && (ts[*i].Weight <= 0 || *end+uint64(ts[*i].Weight) <= pos) {
			if ts[*i].Weight > 0 {
				*end += uint64(ts[*i].Weight)
			}
			*i++
		}
	}
	for pos < t {
		advance(a, &ia, &enda)
		advance(b, &ib, &endb)
		na, nb := enda+uint64(a[ia].Weight), endb+uint64(b[ib].Weight)
		next := min(na, nb)
		if a[ia].Upstream != b[ib].Upstream {
			moved += next - pos
		}
		pos = next
	}
	return moved
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// lcm returns the least common multiple of a and b, or a value past
// exactSlots when it would be larger.
func lcm(a, b uint64) uint64 {
	g := gcd(a, b)
	if a/g > exactSlots/b+1 {
		return exactSlots + 1 // overflow guard: far beyond the exact limit
	}
	return a / g * b
}

// ServiceDisplacement returns the share of request keys, in [0, 1], whose
// upstream changes between two versions of one service, under each
// version's allocation. Two hash splits (or single upstreams) are compared
// by Displacement. Two stable splits are compared exactly, slot by slot:
// the share of the 10,000 table slots whose owner's upstream changes (a
// stable split without a valid table counts as its fresh table). A stable
// version against a hash one is compared, hashes assumed uniform, exactly
// over one period lcm(total, 10000) when that is at most 4 Mi slots, else
// over the fixed key sample of Displacement. It only reads o and n.
func ServiceDisplacement(o, n *Service) float64 {
	os, ns := o.Split.Stable(), n.Split.Stable()
	switch {
	case !os && !ns:
		return Displacement(o.Targets(), n.Targets())
	case os && ns:
		return slotsDisplacement(o.Split, n.Split)
	}
	oa, na := newOwners(o), newOwners(n)
	if oa.period == 0 || na.period == 0 {
		if oa.period == na.period {
			return 0
		}
		return 1
	}
	if l := lcm(oa.period, na.period); l <= exactSlots {
		var moved uint64
		for r := uint64(0); r < l; r++ {
			if oa.owner(r) != na.owner(r) {
				moved++
			}
		}
		return float64(moved) / float64(l)
	}
	var moved int
	var key [8]byte
	for i := 0; i < sampleKeys; i++ {
		for j := range key {
			key[j] = byte(uint64(i) >> (8 * j))
		}
		h := split.Hash(string(key[:]))
		if oa.owner(h) != na.owner(h) {
			moved++
		}
	}
	return float64(moved) / float64(sampleKeys)
}

// owners maps a key's hash to its upstream under one service version's
// allocation; period is the hash modulus (0: no target owns any key).
type owners struct {
	period  uint64
	targets []Target
	table   []uint8
}

func newOwners(s *Service) owners {
	if s.Split.Stable() {
		if t := s.Split.Table(); t != nil {
			return owners{period: split.Slots, targets: s.Split.Targets, table: t}
		}
		return owners{}
	}
	ts := s.Targets()
	return owners{period: positiveTotal(ts), targets: ts}
}

// owner returns the upstream that owns hash h.
func (w owners) owner(h uint64) string {
	if w.table != nil {
		return w.targets[w.table[h%w.period]].Upstream
	}
	return slotOwner(w.targets, h%w.period)
}
