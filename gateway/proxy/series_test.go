package proxy

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// lazyFamilies are the metrics whose series are made on first use.
var lazyFamilies = []string{
	"dwara_split_picks_total", "dwara_split_forced_total", "dwara_split_failovers_total",
	"dwara_request_duration_seconds", "dwara_upstream_retries_total",
	"dwara_upstream_ejections_total", "dwara_upstream_protocol_errors_total",
}

// gatherLazy gathers the lazy families of reg as text, created timestamps
// left out (a series at 0 before its first use has none).
func gatherLazy(t *testing.T, reg *prometheus.Registry) map[string]string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if m.Counter != nil {
				m.Counter.CreatedTimestamp = nil
			}
			if m.Histogram != nil {
				m.Histogram.CreatedTimestamp = nil
			}
		}
		out[mf.GetName()] = mf.String()
	}
	for name := range out {
		if !slices.Contains(lazyFamilies, name) {
			delete(out, name)
		}
	}
	return out
}

// TestLazySeriesExposedFromApply: the series made on first use are on
// /metrics from the apply, at 0, exactly as the children made then would
// be; once made they are the children, once each; those of a pair or an
// upstream the next generation no longer has are gone, and stay gone when
// a request of the older table counts in them afterwards.
func TestLazySeriesExposedFromApply(t *testing.T) {
	t.Parallel()
	g := unservedGateway(t)
	p, reg := g.Proxy, g.reg
	g.apply(t, 1, `
upstreams: [{name: a, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}, {name: b, endpoints: ["10.0.0.3:80"]}]
services: [{name: web, split: {targets: [{upstream: a, weight: 9}, {upstream: b, weight: 1}]}}]
`)
	before := gatherLazy(t, reg)
	if len(before) != len(lazyFamilies) {
		t.Fatalf("families after the apply: %d, want %d: %v", len(before), len(lazyFamilies), before)
	}
	count := map[string]int{}
	for _, s := range g.samples(t, lazyFamilies...) {
		count[s.name]++
		if s.value != 0 {
			t.Errorf("%s%v = %v before any request, want 0", s.name, s.labels, s.value)
		}
	}
	for _, name := range lazyFamilies {
		want := 2 // of (web, a) and (web, b), or of a and b
		if name == "dwara_upstream_protocol_errors_total" {
			want = 2 * int(numReasons)
		}
		if count[name] != want {
			t.Errorf("%s: %d series after the apply, want %d", name, count[name], want)
		}
	}

	// Make every child: the exposition is the same.
	old := p.table.Load()
	for _, tm := range p.children {
		tm.picks.get()
		tm.forced.get()
		tm.failovers.get()
		tm.duration.get()
	}
	for _, s := range p.shared {
		s.retried.get()
		s.ejections.get()
		for r := range s.protocol {
			s.protocol[r].get()
		}
	}
	made := gatherLazy(t, reg)
	for name, text := range before {
		if made[name] != text {
			t.Errorf("%s before its children were made:\n%s\nafter:\n%s", name, text, made[name])
		}
	}
	old.upstreams["b"].shared.ejections.Inc()
	if n := testutil.ToFloat64(p.um.ejections.WithLabelValues("b")); n != 1 {
		t.Errorf("ejections{b} = %v, want 1", n)
	}

	// A generation without b, while a request of the one before, still
	// in flight, counts in series of b made and not made yet.
	g.apply(t, 2, `
upstreams: [{name: a, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}, {name: c, endpoints: ["10.0.0.4:80"]}]
services: [{name: web, upstream: a}, {name: two, base_path: /two, upstream: c}]
`)
	prev := p.table.Load()
	g.apply(t, 3, `
upstreams: [{name: a, endpoints: ["10.0.0.1:80", "10.0.0.2:80"]}]
services: [{name: web, upstream: a}]
`)
	for _, tb := range []*Table{old, prev} {
		for _, svc := range tb.services() {
			for _, tg := range svc.targets {
				if tg.Up.name != "a" {
					tg.picks.Inc()
					tg.duration.Observe(1)
					tg.Up.shared.retried.Inc()
					tg.Up.shared.protocol[reasonUnsolicited].Inc()
				}
			}
		}
	}
	for _, s := range g.samples(t, lazyFamilies...) {
		if s.labels["upstream"] != "a" {
			t.Errorf("%s%v survived the generation that removed its upstream", s.name, s.labels)
		}
	}
	for _, vec := range []prometheus.Collector{p.m.picks, p.m.duration, p.um.retries} {
		if n := testutil.CollectAndCount(vec); n > 1 {
			t.Errorf("%d children left in a vec, want a's only", n)
		}
	}
	if n := testutil.CollectAndCount(p.um.protocol); n > int(numReasons) {
		t.Errorf("%d protocol error children left, want a's only", n)
	}
}

// TestLazySeriesMadeOnce: requests racing to make a series count in one
// child.
func TestLazySeriesMadeOnce(t *testing.T) {
	t.Parallel()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a"})
	var c lazyCounter
	c.init(vec, []string{"v"})
	done := make(chan bool)
	for range 4 {
		go func() {
			for range 100 {
				c.Inc()
			}
			done <- true
		}()
	}
	for range 4 {
		<-done
	}
	if n := testutil.ToFloat64(vec.WithLabelValues("v")); n != 400 {
		t.Errorf("x_total{a=v} = %v, want 400", n)
	}
	var m dto.Metric
	if err := c.metric(nil).Write(&m); err != nil || m.GetCounter().GetValue() != 400 {
		t.Errorf("the lazy series reads %v (%v), want 400", m.GetCounter().GetValue(), err)
	}
}

// TestSeriesOfPairsGone: a generation that carries most services over
// still deletes the series of the pairs it no longer has, of a service
// it compiled anew or dropped, and of a compile that failed.
func TestSeriesOfPairsGone(t *testing.T) {
	t.Parallel()
	g := unservedGateway(t)
	p := g.Proxy
	pairs := func() map[string]bool {
		out := map[string]bool{}
		for _, s := range g.samples(t, "dwara_split_picks_total") {
			out[s.labels["service"]+"/"+s.labels["upstream"]] = true
		}
		return out
	}
	const upstreams = `
upstreams: [{name: a, endpoints: ["10.0.0.1:80"]}, {name: b, endpoints: ["10.0.0.2:80"]},
  {name: c, endpoints: ["10.0.0.3:80"]}, {name: d, endpoints: ["10.0.0.4:80"]}]
`
	g.apply(t, 1, upstreams+`
services: [{name: web, split: {targets: [{upstream: a}, {upstream: b}]}},
  {name: api, base_path: /api, upstream: c}, {name: old, base_path: /old, upstream: d}]
`)
	g.apply(t, 2, upstreams+`
services: [{name: web, split: {targets: [{upstream: a}, {upstream: d}]}}, {name: api, base_path: /api, upstream: c}]
`)
	if got := pairs(); len(got) != 3 || !got["web/a"] || !got["web/d"] || !got["api/c"] {
		t.Errorf("pairs after generation 2: %v, want web/a, web/d, api/c", got)
	}
	bad := mustParse(t, upstreams+`
services: [{name: web, split: {targets: [{upstream: a}, {upstream: d}]}}, {name: api, base_path: /api, upstream: c},
  {name: new, base_path: /new, upstream: b}, {name: broken, base_path: /broken, upstream: a}]
`)
	bad.Services[3].Upstream = "nowhere"
	if err := p.Apply(bad, 3); err == nil {
		t.Fatal("a service of an unknown upstream applied")
	}
	g.apply(t, 4, upstreams+`
services: [{name: web, split: {targets: [{upstream: a}, {upstream: d}]}}, {name: api, base_path: /api, upstream: c}]
`)
	if got := pairs(); len(got) != 3 || got["new/b"] {
		t.Errorf("pairs after a failed compile and generation 4: %v, want web/a, web/d, api/c", got)
	}
}

// TestProtocolErrorsAfterFailedCompile: the pools a failed compile made
// for an upstream no table had do not outlive it, so the generation that
// brings the upstream counts its endpoints' protocol errors.
func TestProtocolErrorsAfterFailedCompile(t *testing.T) {
	t.Parallel()
	g := unservedGateway(t)
	p := g.Proxy
	g.apply(t, 1, `
upstreams: [{name: a, endpoints: ["10.0.0.1:80"]}]
services: [{name: web, upstream: a}]
`)
	const spec = `
upstreams: [{name: a, endpoints: ["10.0.0.1:80"]}, {name: x, endpoints: ["10.0.0.9:80"]}]
services: [{name: web, upstream: a}, {name: other, base_path: /other, upstream: x}]
`
	bad := mustParse(t, spec)
	bad.Services[1].Upstream = "nowhere"
	if err := p.Apply(bad, 2); err == nil {
		t.Fatal("a service of an unknown upstream applied")
	}
	g.apply(t, 3, spec)
	p.table.Load().upstreams["x"].endpoints[0].Pool.Watch.report(reasonUnsolicited)
	var n float64
	for _, s := range g.samples(t, "dwara_upstream_protocol_errors_total") {
		if s.labels["upstream"] == "x" && s.labels["reason"] == "unsolicited" {
			n = s.value
		}
	}
	if n != 1 {
		t.Errorf("dwara_upstream_protocol_errors_total{x, unsolicited} = %v, want 1", n)
	}
}

// unservedGateway is a proxy with its own metrics registry, served by no
// front: for tests that apply generations and read its series.
func unservedGateway(t *testing.T) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg})
	t.Cleanup(p.Close)
	return &gateway{Proxy: p, reg: reg}
}
