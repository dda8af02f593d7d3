package proxy

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the data-plane collectors of DESIGN.md section 6.
// dwara_upstream_endpoint_up is not among them: endpointCollector reports it
// from the live endpoint states at each scrape.
type metrics struct {
	picks      *prometheus.CounterVec
	failovers  *prometheus.CounterVec
	sticky     prometheus.Counter
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	generation prometheus.Gauge
	applySecs  prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, p *Proxy) *metrics {
	m := &metrics{
		picks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_split_picks_total",
			Help: "Requests routed to each target of a service, by the split pick.",
		}, []string{"service", "upstream"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_split_failovers_total",
			Help: "Requests whose picked target had no endpoint up, by the target that was picked; they went to the next target with an endpoint up.",
		}, []string{"service", "upstream"}),
		sticky: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dwara_sticky_sessions_total",
			Help: "Sticky sessions started: affinity cookies minted and set.",
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_requests_total",
			Help: "Proxied requests by service, upstream and response status code.",
		}, []string{"service", "upstream", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dwara_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its proxied response.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"service", "upstream"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dwara_generation_active",
			Help: "The configuration generation the data plane serves by; 0 before the first.",
		}),
		applySecs: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dwara_generation_apply_seconds",
			Help:    "Time to compile and swap in a generation.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.picks, m.failovers, m.sticky, m.requests, m.duration,
			m.generation, m.applySecs, endpointCollector{p})
	}
	return m
}

// codeCounters caches the dwara_requests_total child of each status code for
// one (service, upstream) pair, so the hot path resolves it with one atomic
// load instead of a label lookup. Safe for concurrent use.
type codeCounters struct {
	vec               *prometheus.CounterVec
	service, upstream string
	byCode            [600]atomic.Pointer[prometheus.Counter]
}

func (c *codeCounters) inc(code int) {
	if code < 100 || code >= len(c.byCode) {
		c.vec.WithLabelValues(c.service, c.upstream, strconv.Itoa(code)).Inc()
		return
	}
	p := c.byCode[code].Load()
	if p == nil {
		ctr := c.vec.WithLabelValues(c.service, c.upstream, strconv.Itoa(code))
		c.byCode[code].CompareAndSwap(nil, &ctr)
		p = c.byCode[code].Load()
	}
	(*p).Inc()
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
			ch <- prometheus.MustNewConstMetric(endpointUpDesc, prometheus.GaugeValue, v, name, e.addr)
		}
	}
}
