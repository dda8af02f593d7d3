package proxy

import (
	"maps"
	"slices"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Series made on first use.
//
// A generation has series of its own for every target (picks, forced,
// failovers, duration) and upstream (retries, ejections, and a protocol
// error count per reason): some 110,000 for 10,000 services. A child of
// a client_golang vec costs about a microsecond and a dozen allocations
// to make (its label pairs, its created timestamp), which was half of
// such a generation's first apply. A lazy series therefore makes its
// child when first counted, and until then its family's collector
// (lazyFamily) exposes it at 0, as the child would be: a scrape sees
// every series of the generation served from its apply on, as before.

// vecOf is a metric vec whose children are M.
type vecOf[M any] interface {
	WithLabelValues(...string) M
	DeleteLabelValues(...string) bool
}

// lazy is the child of vec with labels, made on its first use. Safe for
// concurrent use once init returned; the zero value is not usable.
type lazy[V vecOf[M], M any] struct {
	vec    V
	labels []string
	child  atomic.Pointer[M]
	// gone is set when the series is deleted (drop): a request of an
	// older table that makes the child afterwards deletes it again.
	gone atomic.Bool
}

func (l *lazy[V, M]) init(vec V, labels []string) { l.vec, l.labels = vec, labels }

// get returns the child, making it on first use (no allocation after
// that).
func (l *lazy[V, M]) get() M {
	if c := l.child.Load(); c != nil {
		return *c
	}
	c := l.vec.WithLabelValues(l.labels...)
	l.child.Store(&c)
	if l.gone.Load() {
		l.vec.DeleteLabelValues(l.labels...)
	}
	return c
}

// drop deletes the series. Called under applyMu.
func (l *lazy[V, M]) drop() {
	l.gone.Store(true)
	l.vec.DeleteLabelValues(l.labels...)
}

// metric is the series as a scrape sees it: the child, or zero's metric
// of its labels before the child is made.
func (l *lazy[V, M]) metric(zero func(labels []string) prometheus.Metric) prometheus.Metric {
	if c := l.child.Load(); c != nil {
		return any(*c).(prometheus.Metric)
	}
	return zero(l.labels)
}

// lazyCounter is a lazy child of a counter vec.
type lazyCounter struct {
	lazy[*prometheus.CounterVec, prometheus.Counter]
}

func (c *lazyCounter) Inc() { c.get().Inc() }

// lazyObserver is a lazy child of a histogram vec.
type lazyObserver struct {
	lazy[*prometheus.HistogramVec, prometheus.Observer]
}

func (o *lazyObserver) Observe(v float64) { o.get().Observe(v) }

// seriesMetric is what lazyFamily reads of a lazy series.
type seriesMetric interface {
	metric(zero func(labels []string) prometheus.Metric) prometheus.Metric
}

// liveSet publishes, for scrapes, the holders of lazy series (of type T)
// the proxy keeps in a map: their list, made again after a change.
// Marked and published under applyMu; read by scrapes.
type liveSet[T any] struct {
	list  atomic.Pointer[[]T]
	dirty bool
}

// changed marks the map of holders changed.
func (s *liveSet[T]) changed() { s.dirty = true }

// publish makes the list of m's holders the one scrapes read, when m
// changed since the last.
func (s *liveSet[T]) publish(m map[string]T) {
	if !s.dirty {
		return
	}
	list := slices.Collect(maps.Values(m))
	s.list.Store(&list)
	s.dirty = false
}

func (s *liveSet[T]) load() []T {
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// lazyFamily is the collector of a vec whose children are lazy series:
// it exposes the series of the holders in live, each once, made or not.
type lazyFamily[T any] struct {
	vec  prometheus.Collector
	zero func(labels []string) prometheus.Metric
	live *liveSet[T]
	// series yields the family's series of a holder.
	series func(h T, yield func(seriesMetric))
}

func (f lazyFamily[T]) Describe(ch chan<- *prometheus.Desc) { f.vec.Describe(ch) }

func (f lazyFamily[T]) Collect(ch chan<- prometheus.Metric) {
	yield := func(s seriesMetric) { ch <- s.metric(f.zero) }
	for _, h := range f.live.load() {
		f.series(h, yield)
	}
}

// descOf is the one Desc of vec.
func descOf(vec prometheus.Collector) *prometheus.Desc {
	ch := make(chan *prometheus.Desc, 1)
	vec.Describe(ch)
	return <-ch
}

// zeroCounter returns the zero function of a counter vec's lazyFamily.
func zeroCounter(vec *prometheus.CounterVec) func([]string) prometheus.Metric {
	desc := descOf(vec)
	return func(labels []string) prometheus.Metric {
		return prometheus.MustNewConstMetric(desc, prometheus.CounterValue, 0, labels...)
	}
}

// zeroHistogram returns the zero function of the lazyFamily of a
// histogram vec with buckets.
func zeroHistogram(vec *prometheus.HistogramVec, buckets []float64) func([]string) prometheus.Metric {
	desc := descOf(vec)
	empty := make(map[float64]uint64, len(buckets)) // read, never written, by the metrics
	for _, b := range buckets {
		empty[b] = 0
	}
	return func(labels []string) prometheus.Metric {
		return prometheus.MustNewConstHistogram(desc, 0, 0, empty, labels...)
	}
}
