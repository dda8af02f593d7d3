// Package split implements the deterministic weighted split of the data plane:
// the weighting algorithm that picks one target of a service for a request.
//
// A request's key (its sticky cookie value, else its request id) is hashed
// with FNV-1a 64-bit; the hash modulo the total weight is a slot, and the slot
// falls into one target by walking the targets' cumulative weights. A target
// of weight 0 owns no slot and is never picked. The pick is stateless: no
// locks, no counters and no allocation, so every proxy replica, given the same
// generation, sends the same key to the same target.
//
// Because slots are laid out in target order, a change that keeps the total
// moves exactly the slots whose owner changed (95/5 -> 90/10 moves 5% of keys,
// all from the first target to the second); a change of the total reshuffles
// keys. The share a change of weights moves is computed by the config package
// (config.Displacement), which owns the spec's targets.
//
// A stable split (NewStable, see slots.go) picks by a slot table of 10,000
// slots carried in the generation instead, so that any change of weights,
// the total included, moves only the minimal share of keys.
package split

import (
	"errors"
	"fmt"
)

// MaxTargets is the largest number of targets a Split holds.
const MaxTargets = 8

// FNV-1a 64-bit parameters.
const (
	offset64 = 14695981039346656037
	prime64  = 1099511628211
)

// Hash returns the FNV-1a 64-bit hash of key. It does not allocate.
func Hash(key string) uint64 {
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	return h
}

// Split is a compiled weighted split. The zero value has no targets and picks
// -1. A Split is immutable after New and safe for concurrent use.
type Split struct {
	n       int
	weights [MaxTargets]uint64
	cum     [MaxTargets]uint64 // cum[i] = weights[0] + ... + weights[i]
	total   uint64
	// slots is the slot table of a stable split (NewStable); nil for the
	// hash split of New.
	slots *[Slots]uint8
}

// New compiles weights (1..MaxTargets entries, each >= 0, with a positive
// total that fits in a uint64) into a Split. Any other weights are refused
// with an error, never a panic, so New may be given weights that were not
// validated.
func New(weights []int) (*Split, error) {
	if len(weights) == 0 || len(weights) > MaxTargets {
		return nil, fmt.Errorf("split: %d targets, want 1..%d", len(weights), MaxTargets)
	}
	s := &Split{n: len(weights)}
	for i, w := range weights {
		if w < 0 {
			return nil, fmt.Errorf("split: target %d has negative weight %d", i, w)
		}
		if s.total+uint64(w) < s.total {
			return nil, fmt.Errorf("split: total weight overflows at target %d", i)
		}
		s.weights[i] = uint64(w)
		s.total += uint64(w)
		s.cum[i] = s.total
	}
	if s.total == 0 {
		return nil, errors.New("split: total weight is 0")
	}
	return s, nil
}

// Len returns the number of targets.
func (s *Split) Len() int { return s.n }

// Total returns the total weight.
func (s *Split) Total() uint64 { return s.total }

// Weight returns target i's weight.
func (s *Split) Weight(i int) uint64 { return s.weights[i] }

// Pick returns the index of the target that owns key.
func (s *Split) Pick(key string) int { return s.PickHash(Hash(key)) }

// PickHash returns the index of the target that owns the slot h % total,
// or for a stable split the owner of table slot h % Slots.
func (s *Split) PickHash(h uint64) int {
	if s.total == 0 {
		return -1
	}
	if s.slots != nil {
		return int(s.slots[h%Slots])
	}
	slot := h % s.total
	for i := 0; i < s.n; i++ {
		if slot < s.cum[i] {
			return i
		}
	}
	return -1 // unreachable: slot < total = cum[n-1]
}

// PickExcluding is the failover pick: it walks the same way over the weights
// of the targets not in the excluded bit set (bit i = target i excluded),
// slot = h % (remaining total). It returns -1 when every target with weight is
// excluded. It does not allocate. The proxy calls it only when every endpoint
// of the picked target is marked down (by the upstream's health checks).
//
// For a stable split, a key whose table slot's owner is not excluded stays
// with that owner; a key whose owner is excluded is placed by the same walk
// over the remaining targets' weights, so the keys of a down target spread
// over the others in proportion to their weights, deterministically.
func (s *Split) PickExcluding(h uint64, excluded uint8) int {
	if s.slots != nil {
		if o := s.slots[h%Slots]; excluded&(1<<o) == 0 {
			return int(o)
		}
	}
	var total uint64
	for i := 0; i < s.n; i++ {
		if excluded&(1<<i) == 0 {
			total += s.weights[i]
		}
	}
	if total == 0 {
		return -1
	}
	slot := h % total
	var cum uint64
	for i := 0; i < s.n; i++ {
		if excluded&(1<<i) != 0 {
			continue
		}
		cum += s.weights[i]
		if slot < cum {
			return i
		}
	}
	return -1
}
