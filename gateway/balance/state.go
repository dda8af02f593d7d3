package balance

import (
	"math"
	"sync/atomic"
	"time"
)

const (
	// ewmaTau is the decay time constant of the latency estimate: a sample
	// weighs 1/e of its original weight after ewmaTau without news.
	ewmaTau = 10 * time.Second
	// failedLatency is the least latency a failed request counts as, so a
	// failing endpoint looks slow to peak_ewma even when it fails fast.
	failedLatency = time.Second
)

// epoch anchors the monotonic timestamps kept in State.
var epoch = time.Now()

// monotonic returns the monotonic time since epoch in nanoseconds. It is
// always positive after the first nanosecond, so 0 can mean "never".
func monotonic() int64 { return int64(time.Since(epoch)) }

// State is the live state of one endpoint: whether it is up, how many
// requests are in flight, and a peak-EWMA estimate of its latency. One State
// is shared by every generation that names the endpoint (see Registry), so it
// survives config swaps.
//
// The zero value is ready to use: up, nothing in flight, no latency known.
// State is safe for concurrent use and must not be copied after first use.
type State struct {
	inflight atomic.Int64
	// ewma holds the float64 bits of the latency estimate in nanoseconds;
	// 0 means no sample yet.
	ewma atomic.Uint64
	// stamp is the monotonic time of the last sample; 0 means never.
	stamp atomic.Int64
	// down is inverted so that the zero State is up.
	down atomic.Bool
	// Pad to a cache line: inflight is written on every request, and States
	// of different endpoints should not share a line.
	_ [64 - 28]byte
}

// Up reports whether the endpoint may receive requests.
func (s *State) Up() bool { return !s.down.Load() }

// SetUp marks the endpoint up or down and reports whether that changed its
// state, so a health checker can log and count transitions only. The active
// health checks (gateway/health) call it.
func (s *State) SetUp(up bool) (changed bool) {
	return s.down.Swap(!up) == up
}

// Inflight returns the number of requests started with Begin and not yet
// ended with Done.
func (s *State) Inflight() int64 { return s.inflight.Load() }

// Begin marks a request started on the endpoint and returns its start time,
// to be passed to Done when the request ends. Every Begin must be paired with
// exactly one Done.
func (s *State) Begin() time.Time {
	s.inflight.Add(1)
	return time.Now()
}

// Done ends a request started with Begin at start and feeds its latency into
// the peak-EWMA estimate. A failed request (transport error or 5xx, as the
// caller decides) counts as at least one second, so peak_ewma steers away
// from a failing endpoint even when it fails fast.
func (s *State) Done(start time.Time, failed bool) {
	s.inflight.Add(-1)
	rtt := time.Since(start)
	if rtt < 0 {
		rtt = 0
	}
	if failed && rtt < failedLatency {
		rtt = failedLatency
	}
	s.observe(float64(rtt), monotonic())
}

// EWMA returns the current latency estimate: the peak-EWMA of the samples
// fed to Done, decayed towards zero for the time since the last one (so an
// endpoint that was slow and has since been avoided is tried again). It is 0
// before the first sample.
func (s *State) EWMA() time.Duration {
	return time.Duration(s.estimate(monotonic()))
}

// observe folds a latency sample of rtt nanoseconds taken at monotonic time
// now into the estimate. A sample above the decayed estimate replaces it at
// once (the "peak"); a lower one is averaged in with weight 1-exp(-Δt/τ),
// where Δt is the time since the previous sample. Concurrent samples are
// each folded in exactly once (compare-and-swap); the timestamp is
// last-writer-wins, which only blurs Δt between samples that raced.
func (s *State) observe(rtt float64, now int64) {
	for {
		oldBits := s.ewma.Load()
		old := math.Float64frombits(oldBits)
		w := decay(now - s.stamp.Load())
		next := rtt
		if decayed := old * w; rtt < decayed {
			next = decayed + rtt*(1-w)
		}
		if s.ewma.CompareAndSwap(oldBits, math.Float64bits(next)) {
			s.stamp.Store(now)
			return
		}
	}
}

// estimate returns the latency estimate in nanoseconds at monotonic time now,
// decayed for the time since the last sample, without changing the State.
func (s *State) estimate(now int64) float64 {
	v := math.Float64frombits(s.ewma.Load())
	if v == 0 {
		return 0
	}
	return v * decay(now-s.stamp.Load())
}

// decay returns exp(-elapsed/τ), the weight left to an estimate after
// elapsed nanoseconds; 1 for elapsed <= 0.
func decay(elapsed int64) float64 {
	if elapsed <= 0 {
		return 1
	}
	return math.Exp(-float64(elapsed) / float64(ewmaTau))
}
