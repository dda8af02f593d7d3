package proxy

import (
	"crypto/sha256"
	"math"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/split"
)

// ExposureReason says why an exposure was recorded.
type ExposureReason uint8

// The reasons of an exposure.
const (
	// ExposureSticky: a sticky service minted a handle (a new session).
	ExposureSticky ExposureReason = iota + 1
	// ExposureRequest: a request-keyed pick, sampled at
	// Options.ExposureSampleRate.
	ExposureRequest
	// ExposureForced: a request named its branch in the override header.
	ExposureForced
)

// String is the reason's name in the exposures table: sticky, request or
// forced.
func (r ExposureReason) String() string {
	switch r {
	case ExposureSticky:
		return "sticky"
	case ExposureRequest:
		return "request"
	case ExposureForced:
		return "forced"
	}
	return "unknown"
}

// Exposure is one new assignment of a key to a branch. It has a fixed size;
// its strings point at the compiled generation's, so recording one copies
// no bytes and allocates nothing.
type Exposure struct {
	// At is the time of the assignment, in Unix nanoseconds.
	At         int64
	Generation int64
	Service    string
	// Branch is the picked target's upstream name.
	Branch string
	// Share is the branch's weight over the total weight in force.
	Share float64
	// KeyHash is the first 8 bytes of the SHA-256 of the key (the sticky
	// handle, else the request id); the key itself is never kept.
	KeyHash [8]byte
	Reason  ExposureReason
}

// Time is At as a time.Time.
func (e *Exposure) Time() time.Time { return time.Unix(0, e.At) }

// ExposureSink receives the exposures of a proxy, from the request path:
// Expose must never block. ExposureQueue is the one to use.
type ExposureSink interface {
	Expose(Exposure)
}

// DefaultExposureQueue is the capacity of an ExposureQueue made with
// capacity 0.
const DefaultExposureQueue = 65536

// DefaultExposureSampleRate is the fraction of request-keyed picks a
// process records by default (node.Process.ExposureSampleRate).
const DefaultExposureSampleRate = 0.01

// ExposureQueue is a bounded queue of exposures between the request path
// and one writer (gateway/fleet.ExposureWriter). Expose never blocks: a
// full queue drops the exposure and counts it in
// dwara_exposures_dropped_total. The writer counts what it stored in
// dwara_exposures_recorded_total{reason}, and what it gives up on in
// dwara_exposures_dropped_total, with Recorded and Dropped.
type ExposureQueue struct {
	ch       chan Exposure
	dropped  prometheus.Counter
	recorded [ExposureForced + 1]prometheus.Counter
}

// NewExposureQueue returns a queue of capacity exposures (0 means
// DefaultExposureQueue) whose counters are registered with reg (nil
// registers them nowhere).
func NewExposureQueue(capacity int, reg prometheus.Registerer) *ExposureQueue {
	if capacity <= 0 {
		capacity = DefaultExposureQueue
	}
	q := &ExposureQueue{ch: make(chan Exposure, capacity)}
	q.dropped = counter("dwara_exposures_dropped_total",
		"Exposure records lost: the queue was full, or the writer gave them up after a database error.")
	recorded := counterVec("dwara_exposures_recorded_total",
		"Exposure records written to the database, by reason.",
		"reason")
	for r := ExposureSticky; r <= ExposureForced; r++ {
		q.recorded[r] = recorded.WithLabelValues(r.String())
	}
	if reg != nil {
		reg.MustRegister(q.dropped, recorded)
	}
	return q
}

// Expose queues e, or drops and counts it when the queue is full. It never
// blocks and does not allocate.
func (q *ExposureQueue) Expose(e Exposure) {
	select {
	case q.ch <- e:
	default:
		q.dropped.Inc()
	}
}

// C is the queue's channel, for its one reader.
func (q *ExposureQueue) C() <-chan Exposure { return q.ch }

// Cap is the queue's capacity.
func (q *ExposureQueue) Cap() int { return cap(q.ch) }

// Dropped counts n exposures the reader gave up on.
func (q *ExposureQueue) Dropped(n int) { q.dropped.Add(float64(n)) }

// DroppedCounter is dwara_exposures_dropped_total.
func (q *ExposureQueue) DroppedCounter() prometheus.Counter { return q.dropped }

// RecordedCounter is dwara_exposures_recorded_total{reason}.
func (q *ExposureQueue) RecordedCounter(reason ExposureReason) prometheus.Counter {
	return q.recorded[reason]
}

// Recorded counts n exposures of reason the reader stored.
func (q *ExposureQueue) Recorded(reason ExposureReason, n int) {
	if reason >= ExposureSticky && reason <= ExposureForced {
		q.recorded[reason].Add(float64(n))
	}
}

// exposures is a proxy's recording side: the sink and the sampling
// threshold of request-keyed picks.
type exposures struct {
	sink ExposureSink
	// sample is the threshold under which a uniform uint64 samples a
	// request-keyed pick: 0 samples none, MaxUint64 all.
	sample uint64
}

// newExposures returns the recording side of o; nil when o has no sink.
func newExposures(o Options) *exposures {
	if o.Exposures == nil {
		return nil
	}
	x := &exposures{sink: o.Exposures}
	switch r := o.ExposureSampleRate; {
	case r >= 1:
		x.sample = math.MaxUint64
	case r > 0:
		x.sample = uint64(r * (1 << 64))
	}
	return x
}

// sampled reports whether a request-keyed pick is recorded.
func (x *exposures) sampled() bool {
	switch x.sample {
	case 0:
		return false
	case math.MaxUint64:
		return true
	}
	return rand.Uint64() < x.sample
}

// expose records that key was assigned tg of svc, whose share is share, in
// generation gen, for reason. It does not allocate.
func (x *exposures) expose(gen int64, svc *service, tg *Target, share float64, key string, reason ExposureReason) {
	e := Exposure{
		At:         time.Now().UnixNano(),
		Generation: gen,
		Service:    svc.name,
		Branch:     tg.Up.name,
		Share:      share,
		Reason:     reason,
	}
	e.KeyHash = keyHash(key)
	x.sink.Expose(e)
}

// keyHash is the first 8 bytes of the SHA-256 of key, hashed from a fixed
// array (keys are at most 128 bytes: a sticky handle or a request id), so
// that nothing escapes to the heap.
func keyHash(key string) [8]byte {
	var buf [128]byte
	n := copy(buf[:], key)
	sum := sha256.Sum256(buf[:n])
	var h [8]byte
	copy(h[:], sum[:8])
	return h
}

// exposeRoute records the assignment of a route that route picked by the
// split: a sticky mint always, a request-keyed pick when sampled. ti is
// the target's index in svc's split sp.
func (p *Proxy) exposeRoute(t *Table, svc *service, sp *split.Split, ti int, key string, minted bool) {
	x := p.exp
	if x == nil {
		return
	}
	reason := ExposureSticky
	if !minted {
		if svc.sticky != nil || !x.sampled() {
			return // an existing session: not a new assignment
		}
		reason = ExposureRequest
	}
	x.expose(t.generation, svc, svc.targets[ti], share(sp.Weight(ti), sp.Total()), key, reason)
}

// exposeForced records a forced pick of tg in svc; the key is the
// request's valid sticky handle, else its request id.
func (p *Proxy) exposeForced(t *Table, svc *service, tg *Target, requestID string, cookies []string) {
	x := p.exp
	if x == nil || tg == nil {
		return
	}
	sp := svc.split.Load()
	ti := 0
	for i, other := range svc.targets {
		if other == tg {
			ti = i
			break
		}
	}
	key := requestID
	if st := svc.sticky; st != nil {
		if c, ok := affinity.ReadCookieLines(cookies, st.cookie); ok && affinity.Valid(c) {
			key = c
		}
	}
	x.expose(t.generation, svc, tg, share(sp.Weight(ti), sp.Total()), key, ExposureForced)
}

func share(w, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return float64(w) / float64(total)
}
