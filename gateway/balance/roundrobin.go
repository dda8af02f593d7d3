package balance

import "sync/atomic"

// roundRobin hands requests to the endpoints in turn.
//
// A shared atomic counter picks the starting endpoint; when that endpoint is
// down the scan moves on to the next one, trying each endpoint at most once,
// and gives -1 when none is up. With every endpoint up each one receives
// exactly every n-th request; a down endpoint's turns go to the endpoint
// after it.
type roundRobin struct {
	states []*State
	_      cacheLinePad
	next   atomic.Uint64
}

func newRoundRobin(states []*State) *roundRobin {
	return &roundRobin{states: states}
}

// Pick implements Balancer; key is ignored.
func (b *roundRobin) Pick(string) int {
	n := uint64(len(b.states))
	start := (b.next.Add(1) - 1) % n
	for i := range n {
		idx := start + i
		if idx >= n {
			idx -= n
		}
		if b.states[idx].Up() {
			return int(idx)
		}
	}
	return -1
}
