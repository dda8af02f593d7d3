package balance

import "math/rand/v2"

// defaultLatency stands in for the latency of an endpoint that has no sample
// yet, so new endpoints look cheap but not free and receive traffic at once.
const defaultLatency = 1e6 // 1ms in nanoseconds

// peakEWMA picks by the power of two random choices over a latency cost.
//
// Each pick draws two distinct endpoints at random (math/rand/v2's top-level
// generator, which is per-thread and takes no lock) and sends the request to
// the one with the lower cost, estimate × (in flight + 1), where estimate is
// the State's peak-EWMA latency decayed for the time since its last sample
// (1ms for an endpoint never measured). The peak-sensitive average reacts at
// once to an endpoint turning slow and forgets it over ~10s, and the decay
// lets a slow endpoint that is no longer picked win again after a while so
// its estimate gets refreshed. Two random choices instead of the global
// minimum keep the picks of many concurrent requests from herding onto one
// endpoint between updates.
//
// A down endpoint among the two is passed over for the other one; when both
// are down, the pick falls back to the cheapest up endpoint of the whole
// pool, or -1 when none is up.
type peakEWMA struct {
	states []*State
}

func newPeakEWMA(states []*State) *peakEWMA {
	return &peakEWMA{states: states}
}

// Pick implements Balancer; key is ignored.
func (b *peakEWMA) Pick(string) int {
	n := len(b.states)
	if n == 1 {
		if b.states[0].Up() {
			return 0
		}
		return -1
	}
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i {
		j++
	}
	si, sj := b.states[i], b.states[j]
	upI, upJ := si.Up(), sj.Up()
	switch {
	case upI && upJ:
		now := monotonic()
		if cost(sj, now) < cost(si, now) {
			return j
		}
		return i
	case upI:
		return i
	case upJ:
		return j
	}
	return b.cheapest()
}

// cheapest returns the up endpoint with the lowest cost, or -1.
func (b *peakEWMA) cheapest() int {
	now := monotonic()
	best, bestCost := -1, 0.0
	for i, s := range b.states {
		if !s.Up() {
			continue
		}
		if c := cost(s, now); best < 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

// cost is the expected wait for one more request on s at monotonic time now.
func cost(s *State, now int64) float64 {
	est := s.estimate(now)
	if est == 0 {
		est = defaultLatency
	}
	inflight := s.Inflight()
	if inflight < 0 {
		inflight = 0
	}
	return est * float64(inflight+1)
}
