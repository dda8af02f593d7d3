package balance

import "sync/atomic"

// leastConn sends a request to the up endpoint with the fewest requests in
// flight (State.Begin to State.Done).
//
// A first scan finds the lowest in-flight count among the up endpoints and
// how many endpoints share it. When several tie (an idle pool, or equal
// load), a counter that advances with every such pick chooses among the tied
// endpoints in turn, so they share the requests evenly. (Merely starting the
// scan at a rotating offset would not: an endpoint that follows a busier one
// would also receive that one's turns.) The counts are read one at a time
// without a snapshot; when they move between the two scans the pick falls
// back to the first least-loaded endpoint, which costs balance, never
// correctness.
type leastConn struct {
	states []*State
	_      cacheLinePad
	next   atomic.Uint64
}

func newLeastConn(states []*State) *leastConn {
	return &leastConn{states: states}
}

// Pick implements Balancer; key is ignored.
func (b *leastConn) Pick(string) int {
	first, least, ties := -1, int64(0), uint64(0)
	for i, s := range b.states {
		if !s.Up() {
			continue
		}
		switch load := s.Inflight(); {
		case first < 0 || load < least:
			first, least, ties = i, load, 1
		case load == least:
			ties++
		}
	}
	if ties <= 1 {
		return first
	}
	nth := (b.next.Add(1) - 1) % ties
	for i := first; i < len(b.states); i++ {
		if s := b.states[i]; s.Up() && s.Inflight() == least {
			if nth == 0 {
				return i
			}
			nth--
		}
	}
	return first
}
