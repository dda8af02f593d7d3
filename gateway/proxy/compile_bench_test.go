package proxy

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
// reports the heap it keeps (MB) once applied. Every upstream differs from
// the generation served before (its connect timeout), so nothing is
// carried over.
func BenchmarkCompile1000x8(b *testing.B) {
	spec := largeSpec(b, 1000, 8)
	other := spec.Clone()
	for i := range other.Upstreams {
		other.Upstreams[i].ConnectTimeoutMS++
	}
	p := New(Options{})
	defer p.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s := spec
		if i%2 == 1 {
			s = other
		}
		if err := p.Apply(s, int64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportHeap(b, spec)
}

// reportHeap reports the heap a fresh proxy keeps for spec once applied,
// as heap-MB.
func reportHeap(b *testing.B, spec *config.Spec) {
	b.Helper()
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

// scaleSpec is a generation of n services, each on its own base path with
// its own upstream of two endpoints; every fourth splits 95/5 with a
// second upstream of its own (a canary), and every third is sticky. With
// n = 10,000: 12,500 upstreams, 25,000 endpoints. changed, when >= 0, is
// the service whose canary weight differs (90/10 for a split, a third
// endpoint otherwise): the same generation with one service changed.
func scaleSpec(tb testing.TB, n, changed int) *config.Spec {
	tb.Helper()
	b := spectest.New()
	for s := range n {
		port := 10000 + (2*s)%50000
		name := fmt.Sprintf("u-%d", s)
		eps := []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.2:%d", port)}
		if s == changed && s%4 != 0 {
			eps = append(eps, fmt.Sprintf("127.0.0.3:%d", port))
		}
		b.Upstream(name, eps...)
		if s%4 == 0 {
			canaryName := fmt.Sprintf("u-%d-canary", s)
			b.Upstream(canaryName, fmt.Sprintf("127.0.0.1:%d", port+1), fmt.Sprintf("127.0.0.2:%d", port+1))
			w := 5
			if s == changed {
				w = 10
			}
			b.Split(fmt.Sprintf("svc-%d", s), fmt.Sprintf("/s%d", s), spectest.T(name, 100-w), spectest.T(canaryName, w))
		} else {
			b.Route(fmt.Sprintf("svc-%d", s), fmt.Sprintf("/s%d", s), name)
		}
		if s%3 == 0 {
			b.Sticky("sid", 0)
		}
	}
	return b.Parsed(tb)
}

// BenchmarkCompile10000 measures the first apply of a generation of
// 10,000 services (scaleSpec) on a new proxy, which compiles all of it and
// sets up its metric series, each made on its first use (series.go), at 0
// on /metrics until then (as a start or a restart does; a proxy that
// serves a generation carries over what did not change, see
// BenchmarkReapplyOneChanged), and reports the heap the applied table
// keeps (MB). 2,500 and 5,000 services show how it grows.
func BenchmarkCompile10000(b *testing.B) {
	for _, n := range []int{2500, 5000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			spec := scaleSpec(b, n, -1)
			b.ReportAllocs()
			b.ResetTimer()
			var cpu time.Duration
			for range b.N {
				b.StopTimer()
				p := New(Options{})
				runtime.GC()
				b.StartTimer()
				c0 := cpuTime(b)
				if err := p.Apply(spec, 1); err != nil {
					b.Fatal(err)
				}
				cpu += cpuTime(b) - c0
				b.StopTimer()
				p.Close()
				b.StartTimer()
			}
			b.StopTimer()
			b.ReportMetric(float64(cpu)/float64(b.N)/1e6, "cpu-ms/op")
			reportHeap(b, spec)
		})
	}
}

// BenchmarkReapplyOneChanged measures applying a generation of 10,000
// services on a proxy that serves the same generation but for one
// service (a split's canary weight, or a route's endpoints), and reports
// the CPU time an apply takes (the garbage collector's included).
func BenchmarkReapplyOneChanged(b *testing.B) {
	for _, changed := range []int{4000, 4001} {
		name := "split weight"
		if changed%4 != 0 {
			name = "upstream endpoints"
		}
		b.Run(name, func(b *testing.B) { reapply(b, scaleSpec(b, 10000, -1), scaleSpec(b, 10000, changed)) })
	}
}

// reapply applies specs in turn (after the first) on a proxy that serves
// the one before.
func reapply(b *testing.B, specs ...*config.Spec) {
	p := New(Options{})
	defer p.Close()
	if err := p.Apply(specs[0], 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	for i := range b.N {
		if err := p.Apply(specs[(i+1)%len(specs)], int64(i+2)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkReapplyAllChanged measures applying a generation of 10,000
// services on a proxy that serves one where every upstream differs (its
// connect timeout): nothing is carried over, everything is compiled again,
// but the metric series and connection pools exist already.
func BenchmarkReapplyAllChanged(b *testing.B) {
	a := scaleSpec(b, 10000, -1)
	c := a.Clone()
	for i := range c.Upstreams {
		c.Upstreams[i].ConnectTimeoutMS++
	}
	reapply(b, a, c)
}

// cpuTime is the CPU time (user and system) the process has used, which
// on a machine shared with other work says more about a benchmark's cost
// than its wall-clock time: report it per op with reportCPU.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time used since start per op of b, in ms.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkGather10000 measures a scrape of the proxy's metrics (a
// Gather of its registry) once a generation of 10,000 services is
// applied and before any request: some 110,000 series at 0.
func BenchmarkGather10000(b *testing.B) {
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg})
	defer p.Close()
	if err := p.Apply(scaleSpec(b, 10000, -1), 1); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
