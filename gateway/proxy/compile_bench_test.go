package proxy

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// largeSpec is a generation of services x targets: every target its own
// upstream of two endpoints, every service on its own base path, a third
// of them sticky.
func largeSpec(tb testing.TB, services, targets int) *config.Spec {
	tb.Helper()
	b := spectest.New()
	for s := range services {
		ts := make([]config.Target, targets)
		for t := range targets {
			name := fmt.Sprintf("u-%d-%d", s, t)
			port := 10000 + (s*targets+t)%50000
			b.Upstream(name, fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.2:%d", port))
			ts[t] = spectest.T(name, 1+t)
		}
		b.Split(fmt.Sprintf("svc-%d", s), fmt.Sprintf("/s%d", s), ts...)
		if s%3 == 0 {
			b.Sticky("sid", 0)
		}
	}
	return b.Parsed(tb)
}

// BenchmarkCompile1000x8 measures compiling and swapping in a generation of
// 1,000 services x 8 targets (8,000 upstreams, 16,000 endpoints), and
// reports the heap it keeps (MB) once applied.
func BenchmarkCompile1000x8(b *testing.B) {
	spec := largeSpec(b, 1000, 8)
	p := New(Options{})
	defer p.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := p.Apply(spec, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var before, after runtime.MemStats
	q := New(Options{})
	defer q.Close()
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := q.Apply(spec, 1); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/(1<<20), "heap-MB")
}

// BenchmarkRoute measures the routing step of one request (match, key,
// pick, balancer, bookkeeping of the pick): a returning sticky session,
// and a new one whose handle is minted.
func BenchmarkRoute(b *testing.B) {
	p := New(Options{})
	defer p.Close()
	spec := spectest.New().
		Upstream("stable", "127.0.0.1:9001", "127.0.0.1:9002").
		Upstream("canary", "127.0.0.1:9101").
		Split("web", "/", spectest.T("stable", 95), spectest.T("canary", 5)).Sticky("sid", 0).
		Parsed(b)
	if err := p.Apply(spec, 1); err != nil {
		b.Fatal(err)
	}
	t := p.table.Load()
	for _, bc := range []struct {
		name    string
		cookies []string
	}{
		{"returning session", []string{"theme=dark; sid=0123456789abcdef01234567"}},
		{"new session", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := &Request{Host: "example.test", Path: "/x", Cookies: bc.cookies, RequestID: "req-1", ClientIP: "127.0.0.1"}
			b.ReportAllocs()
			for b.Loop() {
				if rt := p.Route(t, v); rt.Endpoint == nil {
					b.Fatal("no endpoint")
				}
			}
		})
	}
}

// BenchmarkRouteThreeRules is BenchmarkRoute's returning session on a split
// with three match rules, none of which the request meets (each is
// checked) and then one it meets (the last).
func BenchmarkRouteThreeRules(b *testing.B) {
	p := New(Options{})
	defer p.Close()
	beta, eu, mobile := "beta", "eu-", "(?i)mobile"
	spec := spectest.New().
		Upstream("stable", "127.0.0.1:9001", "127.0.0.1:9002").
		Upstream("canary", "127.0.0.1:9101").
		Split("web", "/", spectest.T("stable", 95), spectest.T("canary", 5)).Sticky("sid", 0).
		Edit(func(s *config.Spec) {
			s.Services[0].Split.Match = []config.MatchRule{
				{Name: "testers", Headers: map[string]config.StringMatch{"X-User-Group": {Exact: &beta}}, Target: "canary"},
				{Name: "eu", Headers: map[string]config.StringMatch{"X-Region": {Prefix: &eu}}, Target: "canary"},
				{Name: "mobile", Headers: map[string]config.StringMatch{"User-Agent": {Regex: &mobile}}, Target: "canary"},
			}
		}).Parsed(b)
	if err := p.Apply(spec, 1); err != nil {
		b.Fatal(err)
	}
	t := p.table.Load()
	for _, bc := range []struct {
		name, agent, want string
	}{
		{"no rule met", "Mozilla/5.0 (X11; Linux x86_64)", ""},
		{"third rule met", "Mozilla/5.0 (iPhone) Mobile/15E148", "canary"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			v := &Request{Host: "example.test", Path: "/x", Cookies: []string{"theme=dark; sid=0123456789abcdef01234567"}, RequestID: "req-1", ClientIP: "127.0.0.1"}
			v.AddField("Accept", "*/*")
			v.AddField("X-Region", "us-east")
			v.AddField("User-Agent", bc.agent)
			b.ReportAllocs()
			for b.Loop() {
				rt := p.Route(t, v)
				if rt.Endpoint == nil || bc.want != "" && rt.Target.Up.name != bc.want {
					b.Fatal("not routed as expected")
				}
			}
		})
	}
}
