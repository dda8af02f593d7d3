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

// Ejection times of the passive checks (see State.Eject). The first
// ejection of an endpoint lasts EjectionBase; each ejection that follows
// another without a success in between lasts twice the one before, at most
// EjectionMax: 1s, 2s, 4s, 8s, 16s, 30s, 30s, ...
const (
	EjectionBase = time.Second
	EjectionMax  = 30 * time.Second
)

// maxStreak bounds the failure streaks, so that an endpoint failing for
// ever (and never ejected, because of the cap on ejections) cannot
// overflow them.
const maxStreak = 1 << 20

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
// Two things can take an endpoint out of rotation, independently: the
// active health checks, through SetUp, and the passive checks of the proxy,
// through Eject. The endpoint is up only while neither holds it out, so
// neither undoes the other.
//
// The zero value is ready to use: up, nothing in flight, no latency known,
// no failures. State is safe for concurrent use and must not be copied
// after first use.
type State struct {
	inflight atomic.Int64
	// ewma holds the float64 bits of the latency estimate in nanoseconds;
	// 0 means no sample yet.
	ewma atomic.Uint64
	// stamp is the monotonic time of the last sample; 0 means never.
	stamp atomic.Int64
	// down is inverted so that the zero State is up.
	down atomic.Bool
	// ejected is set by the passive checks for the time of an ejection.
	ejected atomic.Bool
	// The streaks of transport failures and of 5xx answers, and the
	// ejections since the last success.
	fails, fails5xx, ejections atomic.Int32
	// Pad to a cache line: inflight is written on every request, and States
	// of different endpoints should not share a line.
	_ [64 - 44]byte
}

// Up reports whether the endpoint may receive requests: the active checks
// do not hold it down and the passive checks have not ejected it.
func (s *State) Up() bool { return !s.down.Load() && !s.ejected.Load() }

// SetUp marks the endpoint up or down for the active health checks
// (gateway/health), which call it, and reports whether that changed their
// verdict, so a health checker can log and count transitions only. A
// passive ejection is neither set nor cleared by it.
func (s *State) SetUp(up bool) (changed bool) {
	return s.down.Swap(!up) == up
}

// MarkedDown reports whether the active health checks hold the endpoint
// down, whatever the passive checks say.
func (s *State) MarkedDown() bool { return s.down.Load() }

// Inflight returns the number of requests started with Begin and not yet
// ended with Done.
func (s *State) Inflight() int64 { return s.inflight.Load() }

// Begin marks a request started on the endpoint and returns its start time,
// to be passed to Done when the request ends. Every Begin must be paired with
// exactly one Done.
func (s *State) Begin() time.Time { return s.BeginAt(time.Now()) }

// BeginAt is Begin for a request that started at now, a time the caller
// has read already.
func (s *State) BeginAt(now time.Time) time.Time {
	s.inflight.Add(1)
	return now
}

// Done ends a request started with Begin at start and feeds its latency into
// the peak-EWMA estimate. A failed request (transport error or 5xx, as the
// caller decides) counts as at least one second, so peak_ewma steers away
// from a failing endpoint even when it fails fast.
func (s *State) Done(start time.Time, failed bool) { s.DoneAt(start, time.Now(), failed) }

// DoneAt is Done for a request that ended at now, a time the caller has
// read already.
func (s *State) DoneAt(start, now time.Time, failed bool) {
	s.inflight.Add(-1)
	rtt := now.Sub(start)
	if rtt < 0 {
		rtt = 0
	}
	if failed && rtt < failedLatency {
		rtt = failedLatency
	}
	s.observe(float64(rtt), int64(now.Sub(epoch)))
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

// Passive checks. The proxy reports the outcome of every proxied request to
// the endpoint's State: PassiveOK for an answer that counts as a success,
// PassiveFailure for a transport failure (no answer header: refused, reset,
// timeout), Passive5xx for a 5xx answer when the upstream counts those.
// When a streak reaches its upstream's threshold the proxy calls Eject,
// unless its cap on ejections per upstream forbids it. An ejection ends by
// itself when its time is up (a timer, not a goroutine, waits for it); the
// streak is kept, so the next failure ejects the endpoint again, for twice
// as long. A success ends both the streaks and the ejection history.

// PassiveOK records a success: it ends the failure streaks and the
// ejection history, so a later ejection lasts EjectionBase again. An
// ejection in progress runs to its end. It only reads when there is
// nothing to reset, so a healthy endpoint's cache line is not written.
func (s *State) PassiveOK() {
	if s.fails.Load() != 0 {
		s.fails.Store(0)
	}
	if s.fails5xx.Load() != 0 {
		s.fails5xx.Store(0)
	}
	if s.ejections.Load() != 0 {
		s.ejections.Store(0)
	}
}

// PassiveFailure records a transport failure and returns the length of
// the streak of consecutive transport failures it extends.
func (s *State) PassiveFailure() int { return streak(&s.fails) }

// Passive5xx records a 5xx answer: an answer came, which ends the streak of
// transport failures, but it extends the streak of 5xx answers, whose
// length it returns. It does not end the ejection history.
func (s *State) Passive5xx() int {
	if s.fails.Load() != 0 {
		s.fails.Store(0)
	}
	return streak(&s.fails5xx)
}

func streak(c *atomic.Int32) int {
	if n := c.Load(); n >= maxStreak {
		return int(n)
	}
	return int(c.Add(1))
}

// Eject takes the endpoint out of rotation (Up reports false) for the
// ejection time: EjectionBase for the first ejection since the last
// success, doubled for each one after, at most EjectionMax. A timer
// (time.AfterFunc) ends it. Eject returns the ejection time, and false
// (doing nothing) when the endpoint is ejected already. The caller decides
// whether an ejection is allowed (the proxy caps them per upstream).
func (s *State) Eject() (time.Duration, bool) {
	return s.eject(func(d time.Duration, end func()) { time.AfterFunc(d, end) })
}

// Ejected reports whether the passive checks hold the endpoint out of
// rotation.
func (s *State) Ejected() bool { return s.ejected.Load() }

// eject is Eject with the timer that ends the ejection started by after,
// which calls end once d has passed (tests drive it by hand).
func (s *State) eject(after func(d time.Duration, end func())) (time.Duration, bool) {
	if !s.ejected.CompareAndSwap(false, true) {
		return 0, false
	}
	n := s.ejections.Load()
	if n < maxStreak {
		s.ejections.Add(1)
	}
	d := ejectionTime(int(n))
	after(d, func() { s.ejected.Store(false) })
	return d, true
}

// ejectionTime is the length of an ejection that follows n ejections
// without a success in between.
func ejectionTime(n int) time.Duration {
	d := EjectionBase
	for ; n > 0 && d < EjectionMax; n-- {
		d *= 2
	}
	return min(d, EjectionMax)
}
