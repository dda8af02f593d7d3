package proxy

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// BenchmarkHealthOverhead is BenchmarkProxyParallel twice in one run, over
// the same upstreams: "off" declares no health_check, "on" declares active
// checks on every endpoint of both upstreams (an hour apart, so the cost
// measured is that of requests through a proxy whose endpoints are
// checked, not of the checks). The passive checks run in both. The ratio of
// their ns/op is the throughput with health checks on versus off.
func BenchmarkHealthOverhead(b *testing.B) {
	stable := startPool(b, "stable", 2)
	canary := startPool(b, "canary", 2)
	for _, bc := range []struct {
		name  string
		check *config.HealthCheck
	}{
		{"off", nil},
		{"on", &config.HealthCheck{Path: "/healthz", IntervalS: 3600, TimeoutS: 2, HealthyThreshold: 2, UnhealthyThreshold: 2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := New(Options{Metrics: prometheus.NewRegistry()})
			b.Cleanup(p.Close) // stops the checkers
			srv := httptest.NewServer(httpHandler(p))
			b.Cleanup(srv.Close)
			spec := spectest.SplitOver([]*demo.Pool{stable, canary}, 95, 5).Edit(func(s *config.Spec) {
				for i := range s.Upstreams {
					s.Upstreams[i].HealthCheck = bc.check
				}
			}).YAML()
			if err := p.Apply(mustParse(b, spec), 1); err != nil {
				b.Fatal(err)
			}
			want := 0
			if bc.check != nil {
				want = len(stable.Addrs) + len(canary.Addrs)
			}
			if n := p.health.Len(); n != want {
				b.Fatalf("%d health checkers running, want %d", n, want)
			}
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Get(srv.URL + "/bench")
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}
