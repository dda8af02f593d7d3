package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// withAnalysis is a canary analysis that only needs to be valid here.
var withAnalysis = config.CanaryAnalysis{
	Enabled: true, WindowSeconds: 60, Step: 1, MinRequests: 10, CooldownSeconds: 30,
	Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
	Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
}

// delta returns what the recorders of service observed since the last
// delta: baseline and canary.
func delta(t *testing.T, g *gateway, service string) (canary.Stats, canary.Stats) {
	t.Helper()
	_, recs := g.CanaryRecorders()
	for _, r := range recs {
		if r.Service == service {
			var b, c canary.Stats
			r.Baseline.Delta(&b)
			r.Canary.Delta(&c)
			return b, c
		}
	}
	t.Fatalf("no recorders of %q in %+v", service, recs)
	return canary.Stats{}, canary.Stats{}
}

// TestCanaryRecording sends requests through a canary group whose baseline
// answers 200 and whose canary fails every request with 500: the
// recorders count each answer once, in the version that answered, every
// 500 as an error; a canary endpoint that cannot be reached (502) is an
// error too; a client that went away is not counted at all.
func TestCanaryRecording(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		b.SetFailRate(1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 50, 50).Analysis(withAnalysis).YAML())

		codes := map[int]uint64{}
		for i := range 200 {
			resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": fmt.Sprintf("rec-%d", i)})
			codes[resp.StatusCode]++
		}
		if codes[200]+codes[500] != 200 || codes[200] == 0 || codes[500] == 0 {
			t.Fatalf("answers %v, want 200s and 500s only", codes)
		}
		base, can := delta(t, g, "web")
		if base.Requests != codes[200] || base.Errors != 0 || base.Latency.Count() != codes[200] {
			t.Errorf("baseline recorded %d requests, %d errors, %d latencies; want %d, 0, %d",
				base.Requests, base.Errors, base.Latency.Count(), codes[200], codes[200])
		}
		if can.Requests != codes[500] || can.Errors != codes[500] || can.Latency.Count() != codes[500] {
			t.Errorf("canary recorded %d requests, %d errors; want %d of each", can.Requests, can.Errors, codes[500])
		}
		if p99 := can.Figures().LatencyP99; !(p99 > 0 && p99 < testrun.Timeout.Seconds()) {
			t.Errorf("canary p99 %v s, want a positive latency", p99)
		}

		// An unreachable canary endpoint: 502, an error of the canary.
		g.apply(t, 2, spectest.New().Upstream("a", a.Addrs...).Upstream("gone", testnet.ClosedAddr(t)).
			Split("web", "/", spectest.T("a", 0), spectest.T("gone", 1)).Analysis(withAnalysis).YAML())
		for range 3 {
			if resp, _ := get(t, client, g.URL+"/", nil); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("unreachable canary: status %d, want 502", resp.StatusCode)
			}
		}
		if base, can := delta(t, g, "web"); base.Requests != 0 || can.Requests != 3 || can.Errors != 3 {
			t.Errorf("unreachable canary: baseline %d requests, canary %d requests %d errors; want 0, 3, 3", base.Requests, can.Requests, can.Errors)
		}
	})
}

// TestCanaryClientGoneNotCounted abandons downloads through a canary group:
// they are counted as 499 in dwara_requests_total but recorded in neither
// version's window, since a client that went away says nothing of the
// version.
func TestCanaryClientGoneNotCounted(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		var short atomic.Int64
		up := startUpstream(t, streamingHandler(&short))
		addr := up.Listener.Addr().String()
		g := startGateway(t, front)
		g.apply(t, 1, spectest.New().Upstream("a", addr).Upstream("b", addr).
			Split("web", "/", spectest.T("a", 1), spectest.T("b", 1)).Analysis(withAnalysis).YAML())
		const aborted = 4
		for range aborted {
			abandon(t, g, "download")
		}
		deadline := time.Now().Add(testrun.Timeout)
		for gone(g) < aborted {
			if time.Now().After(deadline) {
				t.Fatalf("%v requests counted as 499, want %d", gone(g), aborted)
			}
			time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
		}
		// One complete answer, so the recorders are known to work.
		if resp, body := get(t, client, g.URL+"/short", nil); resp.StatusCode != http.StatusOK || body != "short" {
			t.Fatalf("short: %d %q", resp.StatusCode, body)
		}
		base, can := delta(t, g, "web")
		if base.Requests+can.Requests != 1 || base.Errors+can.Errors != 0 {
			t.Errorf("recorded %d + %d requests, %d + %d errors; want only the one complete answer",
				base.Requests, can.Requests, base.Errors, can.Errors)
		}
	})
}

// gone is how many requests of service web g counted as 499.
func gone(g *gateway) float64 {
	return testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "499")) +
		testutil.ToFloat64(g.m.requests.WithLabelValues("web", "b", "499"))
}

// TestSetCanaryWeight swaps only the split of a canary group: the next
// request uses the new weights, a change for another generation or an
// impossible weight changes nothing, and the next Apply brings back the
// generation's own weights.
func TestSetCanaryWeight(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		spec := spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).Analysis(withAnalysis).
			Route("plain", "/plain", "a")
		g.apply(t, 1, spec.YAML())
		if w, ok := g.CanaryWeight("web"); !ok || w != 10 {
			t.Fatalf("canary weight %d, %v; want 10", w, ok)
		}
		pools := func() map[string]int {
			got := map[string]int{}
			for i := range 200 {
				resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": fmt.Sprintf("w-%d", i)})
				got[resp.Header.Get("X-Pool")]++
			}
			return got
		}
		if got := pools(); got["b"] == 0 {
			t.Fatalf("at 90/10: %v, want some to b", got)
		}

		if ok, err := g.SetCanaryWeight(1, "web", 0); !ok || err != nil {
			t.Fatalf("SetCanaryWeight(1, web, 0) = %v, %v", ok, err)
		}
		if got := pools(); got["a"] != 200 {
			t.Fatalf("at 100/0: %v, want all 200 to a", got)
		}
		if v := g.gauge(t, "web"); v != 0 {
			t.Errorf("dwara_canary_weight{group=web} = %v, want 0", v)
		}
		if ok, err := g.SetCanaryWeight(1, "web", 100); !ok || err != nil {
			t.Fatalf("SetCanaryWeight(1, web, 100) = %v, %v", ok, err)
		}
		if got := pools(); got["b"] != 200 {
			t.Fatalf("at 0/100: %v, want all 200 to b", got)
		}

		for _, c := range []struct {
			gen     int64
			service string
			weight  int
			wantErr bool
		}{
			{2, "web", 50, false},   // another generation: ignored
			{0, "web", 50, false},   // another generation: ignored
			{1, "web", 101, true},   // above the total
			{1, "web", -1, true},    // negative
			{1, "plain", 0, true},   // no canary analysis
			{1, "missing", 0, true}, // no such service
		} {
			ok, err := g.SetCanaryWeight(c.gen, c.service, c.weight)
			if ok || (err != nil) != c.wantErr {
				t.Errorf("SetCanaryWeight(%d, %s, %d) = %v, %v; want false, error %v", c.gen, c.service, c.weight, ok, err, c.wantErr)
			}
		}
		if w, _ := g.CanaryWeight("web"); w != 100 {
			t.Errorf("after refused changes: canary weight %d, want 100", w)
		}

		// The next generation has its own weights.
		g.apply(t, 2, spec.YAML())
		if w, _ := g.CanaryWeight("web"); w != 10 || g.gauge(t, "web") != 10 {
			t.Errorf("generation 2: canary weight %d, gauge %v; want 10", w, g.gauge(t, "web"))
		}
		// A generation without the group deletes its series.
		g.apply(t, 3, spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).YAML())
		for _, s := range g.samples(t, "dwara_canary_weight") {
			t.Errorf("series %v left after the group went away", s.labels)
		}
		if gen, recs := g.CanaryRecorders(); gen != 3 || len(recs) != 0 {
			t.Errorf("CanaryRecorders = %d, %v; want 3, none", gen, recs)
		}
	})
}

// gauge returns dwara_canary_weight{group}, -1 when missing.
func (g *gateway) gauge(t *testing.T, group string) float64 {
	t.Helper()
	for _, s := range g.samples(t, "dwara_canary_weight") {
		if s.labels["group"] == group {
			return s.value
		}
	}
	return -1
}

// BenchmarkCanaryAnalysis is BenchmarkProxyParallel with and without
// canary analysis on the split: the ratio of the two is what recording
// costs the proxy.
func BenchmarkCanaryAnalysis(b *testing.B) {
	stable := startPool(b, "stable", 2)
	can := startPool(b, "canary", 2)
	for _, on := range []bool{false, true} {
		name := "off"
		spec := spectest.SplitOver([]*demo.Pool{stable, can}, 95, 5)
		if on {
			name = "on"
			spec = spec.Analysis(withAnalysis)
		}
		b.Run(name, func(b *testing.B) {
			g := startGateway(b, *benchFront)
			g.apply(b, 1, spec.YAML())
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(g.URL + "/bench")
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
