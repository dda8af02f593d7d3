package canary

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"
)

// maxStripes caps the number of stripes of a Recorder.
const maxStripes = 8

// stripePad separates the counters of neighbouring stripes so that no two
// stripes share a cache line, nor an adjacent pair of lines some CPUs
// prefetch together.
const stripePad = 128

// stripe is one shard of a Recorder's counters. Observe writes requests
// first, then errors, then the latency bucket; Delta reads in the reverse
// order, so a snapshot never counts an error or a latency whose request it
// does not count.
type stripe struct {
	requests atomic.Uint64
	errors   atomic.Uint64
	latency  [Buckets]atomic.Uint64
	ttft     [Buckets]atomic.Uint64
	_        [stripePad]byte
}

// Recorder records the requests of one version (one upstream of a canary
// group) on the response path: a request count, an error count and a
// latency histogram, kept in striped atomic counters so that Observe takes
// no lock and allocates nothing. The zero Recorder is not usable; make one
// with NewRecorder. Observe is safe for concurrent use, also concurrently
// with Delta; Delta must be called by one goroutine at a time.
type Recorder struct {
	stripes []stripe
	mask    uint32

	// Pad the fields every Observe reads from the ones Delta writes.
	_ [stripePad]byte

	// prevRequests, prevErrors and prev are the cumulative totals as of
	// the previous Delta; cur is Delta's scratch space.
	prevRequests uint64
	prevErrors   uint64
	prev         Histogram
	cur          Histogram
	prevTTFT     Histogram
	curTTFT      Histogram
}

// NewRecorder returns an empty Recorder with one stripe per processor
// (runtime.GOMAXPROCS(0) rounded up to a power of two, at most 8).
func NewRecorder() *Recorder {
	n := 1
	for n < runtime.GOMAXPROCS(0) && n < maxStripes {
		n <<= 1
	}
	return &Recorder{stripes: make([]stripe, n), mask: uint32(n - 1)}
}

// Observe records one request that took d and failed or not. A negative d
// counts as 0. It takes no lock, does not allocate and is safe for
// concurrent use: the stripe is picked by math/rand/v2's per-thread
// generator.
func (r *Recorder) Observe(d time.Duration, failed bool) {
	s := &r.stripes[rand.Uint32()&r.mask]
	s.requests.Add(1)
	if failed {
		s.errors.Add(1)
	}
	s.latency[BucketOf(d)].Add(1)
}

// ObserveTTFT records one request's time to its first streamed token
// (a model group's). It is not a request of its own: Observe counts the
// request when it ends. Like Observe it takes no lock and does not
// allocate.
func (r *Recorder) ObserveTTFT(d time.Duration) {
	r.stripes[rand.Uint32()&r.mask].ttft[BucketOf(d)].Add(1)
}

// Delta adds to into everything observed since the previous call to Delta
// (since NewRecorder for the first), and remembers the totals for the next
// call. Delta is safe to call concurrently with Observe, but not with
// another Delta on the same Recorder. A request whose Observe runs during
// a Delta may have its count in this Delta and its error or latency in the
// next; summed over successive Deltas the totals are exact. into must not
// be nil.
func (r *Recorder) Delta(into *Stats) {
	cur, curT := &r.cur, &r.curTTFT
	*cur, *curT = Histogram{}, Histogram{}
	for i := range r.stripes {
		s := &r.stripes[i]
		for b := range s.latency {
			cur[b] += s.latency[b].Load()
		}
		for b := range s.ttft {
			curT[b] += s.ttft[b].Load()
		}
	}
	var errs, reqs uint64
	for i := range r.stripes {
		errs += r.stripes[i].errors.Load()
	}
	for i := range r.stripes {
		reqs += r.stripes[i].requests.Load()
	}
	for b, c := range cur {
		into.Latency[b] += c - r.prev[b]
	}
	r.prev = *cur
	for b, c := range curT {
		into.TTFT[b] += c - r.prevTTFT[b]
	}
	r.prevTTFT = *curT
	into.Requests += reqs - r.prevRequests
	into.Errors += errs - r.prevErrors
	r.prevRequests, r.prevErrors = reqs, errs
}
