package proxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the data-plane collectors of docs/observability.md, "Metrics".
// dwara_upstream_endpoint_up is not among them: endpointCollector reports it
// from the live endpoint states at each scrape.
type metrics struct {
	picks      *prometheus.CounterVec
	forced     *prometheus.CounterVec
	failovers  *prometheus.CounterVec
	sticky     prometheus.Counter
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	generation prometheus.Gauge
	applySecs  prometheus.Histogram
	// canaryWeight is the canary weight in force of each canary group.
	canaryWeight *prometheus.GaugeVec
	// mirrors counts the copies of mirrored requests by outcome.
	mirrors *prometheus.CounterVec
	// matches counts the requests each match rule served.
	matches *prometheus.CounterVec
	// modelRequests, modelTTFT and modelTokens are the model aliases'
	// (models.go).
	modelRequests *prometheus.CounterVec
	modelTTFT     *prometheus.HistogramVec
	modelTokens   *prometheus.CounterVec
	// targets are the targetMetrics (Proxy.children) whose lazy series
	// picks, forced, failovers and duration expose.
	targets liveSet[*targetMetrics]
	// retainAll is set when a compile failed: the pairs it made are in
	// no table, and the next retainTargetMetrics looks at every pair.
	// Under applyMu.
	retainAll bool
}

// durationBuckets are dwara_request_duration_seconds's.
var durationBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newMetrics(reg prometheus.Registerer, p *Proxy) *metrics {
	m := &metrics{
		picks: counterVec("dwara_split_picks_total",
			"Requests routed to each target of a service, by the split pick.",
			"service", "upstream"),
		forced: counterVec("dwara_split_forced_total",
			"Requests that named their target in the service's override header and were served by it, whatever the weights.",
			"service", "upstream"),
		failovers: counterVec("dwara_split_failovers_total",
			"Requests whose picked target had no endpoint up, by the target that was picked; they went to the next target with an endpoint up.",
			"service", "upstream"),
		sticky: counter("dwara_sticky_sessions_total",
			"Sticky sessions started: affinity cookies minted and set."),
		requests: counterVec("dwara_requests_total",
			"Proxied requests by service, upstream and response status code.",
			"service", "upstream", "code"),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dwara_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its proxied response.",
			Buckets: durationBuckets,
		}, []string{"service", "upstream"}),
		generation: gauge("dwara_generation_active",
			"The configuration generation the data plane serves by; 0 before the first."),
		applySecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dwara_generation_apply_seconds",
			Help:    "Time to compile and swap in a generation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
		canaryWeight: gaugeVec("dwara_canary_weight",
			"The weight of the canary target of each canary group (named by its service) in force in this data plane: the generation's, or the canary controller's transient one.",
			"group"),
		mirrors: counterVec("dwara_mirror_requests_total",
			"Copies of a service's requests for its mirror upstream, by outcome: sent (an answer came, any status), failed (transport error, or no endpoint up), timeout, dropped (queue full), body_too_large (body over max_body_bytes or of unknown length: not mirrored).",
			"service", "upstream", "outcome"),
		matches: counterVec("dwara_split_matches_total",
			"Requests a match rule of the service's split sent to its target, without the weighted pick.",
			"service", "rule", "upstream"),
		modelRequests: counterVec("dwara_model_requests_total",
			"Requests that named a model alias, by the target that served them (its upstream and model) and the status code; a provider's 429 is its own code.",
			"service", "alias", "upstream", "model", "code"),
		modelTTFT: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dwara_model_ttft_seconds",
			Help:    "Time from sending a model alias request to the first data: event with content of its streamed answer.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"service", "alias", "upstream"}),
		modelTokens: counterVec("dwara_model_tokens_total",
			"Tokens of the answers to model alias requests, from their usage (a JSON answer's, or a stream's final usage chunk), by kind: prompt or completion.",
			"service", "alias", "upstream", "kind"),
	}
	if reg != nil {
		target := func(vec *prometheus.CounterVec, of func(*targetMetrics) *lazyCounter) prometheus.Collector {
			return lazyFamily[*targetMetrics]{vec: vec, zero: zeroCounter(vec), live: &m.targets,
				series: func(tm *targetMetrics, yield func(seriesMetric)) { yield(of(tm)) }}
		}
		reg.MustRegister(
			target(m.picks, func(tm *targetMetrics) *lazyCounter { return &tm.picks }),
			target(m.forced, func(tm *targetMetrics) *lazyCounter { return &tm.forced }),
			target(m.failovers, func(tm *targetMetrics) *lazyCounter { return &tm.failovers }),
			lazyFamily[*targetMetrics]{vec: m.duration, zero: zeroHistogram(m.duration, durationBuckets), live: &m.targets,
				series: func(tm *targetMetrics, yield func(seriesMetric)) { yield(&tm.duration) }},
			m.sticky, m.requests, m.generation, m.applySecs, m.canaryWeight, m.mirrors, m.matches,
			m.modelRequests, m.modelTTFT, m.modelTokens, endpointCollector{p})
	}
	return m
}

// targetMetrics are the metric children of one (service, upstream) pair,
// kept across generations while the pair exists, so the hot path touches
// them with no label lookup: each made on its first use (series.go), the
// codes' as they come. Safe for concurrent use.
type targetMetrics struct {
	picks     lazyCounter
	forced    lazyCounter
	failovers lazyCounter
	duration  lazyObserver
	codes     codeCounters
	// compiled is the last compile (Proxy.compiles) whose table has a
	// target of the pair; read and written under applyMu only.
	compiled int64
}

// codeSlots is how many distinct status codes a (service, upstream) pair
// caches; further codes are counted through a label lookup.
const codeSlots = 16

// codeCounters caches the children of a counter by status code (of
// dwara_requests_total for one (service, upstream), of
// dwara_model_requests_total for one alias target) in a small fixed table:
// a slot is claimed by compare-and-swap on its code, so the hot path does
// a short scan and one atomic add. labels are the values of every label
// but the last, the code. Safe for concurrent use once set.
type codeCounters struct {
	vec    *prometheus.CounterVec
	labels []string
	slots  [codeSlots]struct {
		code atomic.Int32
		ctr  atomic.Pointer[prometheus.Counter]
	}
}

func (c *codeCounters) inc(code int) {
	for i := 0; i < len(c.slots); i++ {
		s := &c.slots[i]
		switch got := s.code.Load(); {
		case got == int32(code):
			if p := s.ctr.Load(); p != nil {
				(*p).Inc()
				return
			}
			// Claimed a moment ago, not filled yet: count by lookup.
			c.child(code).Inc()
			return
		case got == 0 && s.code.CompareAndSwap(0, int32(code)):
			ctr := c.child(code)
			s.ctr.Store(&ctr)
			ctr.Inc()
			return
		case got == 0:
			i-- // lost the race for this slot: look at it again
		}
	}
	c.child(code).Inc()
}

// child looks code's counter up (off the cached path: a slot claimed, or
// more codes than slots).
func (c *codeCounters) child(code int) prometheus.Counter {
	return c.vec.WithLabelValues(append(c.labels[:len(c.labels):len(c.labels)], strconv.Itoa(code))...)
}

// targetMetrics returns the metric children of (service, upstream),
// creating them on first use. Called under applyMu.
func (p *Proxy) targetMetrics(service, upstream string) *targetMetrics {
	key := service + " " + upstream
	tm := p.children[key]
	if tm == nil {
		tm = &targetMetrics{}
		labels := []string{service, upstream}
		tm.picks.init(p.m.picks, labels)
		tm.forced.init(p.m.forced, labels)
		tm.failovers.init(p.m.failovers, labels)
		tm.duration.init(p.m.duration, labels)
		tm.codes.vec, tm.codes.labels = p.m.requests, labels
		p.children[key] = tm
		p.m.targets.changed()
	}
	tm.compiled = p.compiles
	return tm
}

// retainTargetMetrics deletes the series of (service, upstream) pairs that
// table t, just compiled, no longer has: those its compile did not mark
// (targetMetrics.compiled). When t followed a table, only the pairs of
// the services it did not carry over are looked at (t.dropped), unless a
// compile failed since the last look at all (its pairs are in none).
// Called under applyMu.
func (p *Proxy) retainTargetMetrics(t *Table) {
	if t.changed == nil || p.m.retainAll {
		for _, tm := range p.children {
			if tm.compiled != p.compiles {
				p.retainPair(tm)
			}
		}
		p.m.retainAll = false
	} else {
		for _, s := range t.dropped {
			for _, tg := range s.targets {
				p.retainPair(tg.targetMetrics)
			}
			if s.models != nil {
				for _, a := range s.models.aliases {
					for _, tg := range a.targets {
						p.retainPair(tg.targetMetrics)
					}
				}
			}
		}
	}
	t.dropped = nil
	p.m.targets.publish(p.children)
	groups := make(map[string]bool, len(t.canaries))
	for _, svc := range t.canaries {
		groups[svc.name] = true
	}
	for _, a := range t.modelCanaries {
		groups[a.group] = true
	}
	for _, g := range p.canaryGroups {
		if !groups[g] {
			p.m.canaryWeight.DeleteLabelValues(g)
		}
	}
	p.canaryGroups = p.canaryGroups[:0]
	for g := range groups {
		p.canaryGroups = append(p.canaryGroups, g)
	}
	// Each of these looks at every service: not when there are no series
	// it could delete.
	if len(p.mirrors.children) > 0 {
		p.retainMirrorMetrics(t)
	}
	if len(p.matchSeries) > 0 {
		p.retainMatchMetrics(t)
	}
	if len(p.modelSeries) > 0 {
		p.retainModelMetrics(t)
	}
}

// retainPair deletes the series of tm's pair unless the last compile
// marked it. Called under applyMu.
func (p *Proxy) retainPair(tm *targetMetrics) {
	key := tm.codes.labels[0] + " " + tm.codes.labels[1]
	if tm.compiled == p.compiles || p.children[key] != tm {
		return
	}
	delete(p.children, key)
	p.m.targets.changed()
	tm.picks.drop()
	tm.forced.drop()
	tm.failovers.drop()
	tm.duration.drop()
	p.m.requests.DeletePartialMatch(prometheus.Labels{"service": tm.codes.labels[0], "upstream": tm.codes.labels[1]})
}

// matchCounter returns the dwara_split_matches_total child of a rule,
// remembered for retainMatchMetrics. Called under applyMu.
func (p *Proxy) matchCounter(service, rule, upstream string) prometheus.Counter {
	if p.matchSeries == nil {
		p.matchSeries = map[[3]string]bool{}
	}
	p.matchSeries[[3]string{service, rule, upstream}] = true
	return p.m.matches.WithLabelValues(service, rule, upstream)
}

// retainMatchMetrics deletes the series of the match rules that table t
// no longer has. Called under applyMu.
func (p *Proxy) retainMatchMetrics(t *Table) {
	keep := map[[3]string]bool{}
	for _, svc := range t.services() {
		for i := range svc.rules.Len() {
			name, ti := svc.rules.Rule(i)
			keep[[3]string{svc.name, name, svc.targets[ti].Up.name}] = true
		}
	}
	for k := range p.matchSeries {
		if !keep[k] {
			p.m.matches.DeleteLabelValues(k[0], k[1], k[2])
			delete(p.matchSeries, k)
		}
	}
}

// endpointUpDesc describes dwara_upstream_endpoint_up.
var endpointUpDesc = prometheus.NewDesc("dwara_upstream_endpoint_up",
	"1 when the endpoint is up (may receive requests), 0 when it is down.",
	[]string{"upstream", "endpoint"}, nil)

// endpointCollector reports dwara_upstream_endpoint_up from the live endpoint
// states of the generation being served, so the value is current at every
// scrape and endpoints that left the configuration leave the metric.
type endpointCollector struct{ p *Proxy }

func (c endpointCollector) Describe(ch chan<- *prometheus.Desc) { ch <- endpointUpDesc }

func (c endpointCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.p.table.Load()
	if t == nil {
		return
	}
	for name, u := range t.upstreams {
		for _, e := range u.endpoints {
			v := 0.0
			if e.state.Up() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(endpointUpDesc, prometheus.GaugeValue, v, name, e.Addr)
		}
	}
}

// counterVec, counter, gaugeVec and gauge build the data plane's
// collectors from a name, its help and its labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}
