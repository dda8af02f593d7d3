package proxy

import (
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCodeCountersEveryCode: every status code is counted exactly, the
// first codeSlots from the cache and the rest by lookup, under concurrency.
func TestCodeCountersEveryCode(t *testing.T) {
	t.Parallel()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c"}, []string{"service", "upstream", "code"})
	c := &codeCounters{vec: vec, labels: []string{"s", "u"}}
	const workers, rounds = 8, 50
	codes := []int{200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 409, 412, 422, 429, 499, 500, 502, 503, 504, 599}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				for _, code := range codes {
					c.inc(code)
				}
			}
		})
	}
	wg.Wait()
	for _, code := range codes {
		got := testutil.ToFloat64(vec.WithLabelValues("s", "u", strconv.Itoa(code)))
		if got != workers*rounds {
			t.Errorf("code %d counted %v times, want %d", code, got, workers*rounds)
		}
	}
}

// TestSeriesOfRemovedTargetsAreDeleted: a generation that no longer has a
// (service, upstream) pair takes its series with it; the pairs it keeps
// keep their counts.
func TestSeriesOfRemovedTargetsAreDeleted(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		g.apply(t, 1, `
upstreams: [{name: a, endpoints: ["`+a.Addrs[0]+`"]}, {name: b, endpoints: ["`+b.Addrs[0]+`"]}]
services: [{name: one, base_path: /one, upstream: a}, {name: two, base_path: /two, upstream: b}]
`)
		get(t, client, g.URL+"/one", nil)
		get(t, client, g.URL+"/two", nil)
		series := func() map[string]bool {
			t.Helper()
			got := map[string]bool{}
			for _, s := range g.samples(t) {
				if svc := s.labels["service"]; svc != "" {
					got[s.name+"/"+svc+"/"+s.labels["upstream"]] = true
				}
			}
			return got
		}
		before := series()
		for _, name := range []string{"dwara_split_picks_total", "dwara_requests_total", "dwara_request_duration_seconds"} {
			if !before[name+"/two/b"] || !before[name+"/one/a"] {
				t.Fatalf("before: %s lacks a pair: %v", name, before)
			}
		}
		g.apply(t, 2, `
upstreams: [{name: a, endpoints: ["`+a.Addrs[0]+`"]}]
services: [{name: one, base_path: /one, upstream: a}]
`)
		after := series()
		for s := range after {
			if len(s) > 6 && s[len(s)-6:] == "/two/b" {
				t.Errorf("series %s survived the generation that removed service two", s)
			}
		}
		if !after["dwara_split_picks_total/one/a"] {
			t.Errorf("series of service one lost: %v", after)
		}
	})
}
