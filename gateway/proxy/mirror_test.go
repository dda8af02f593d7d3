package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/split"
	"github.com/dwara/dwara/internal/testrun"
)

// seen is one request an upstream received.
type seen struct {
	id, body, mirror, upstream string
}

// mirrorRecorder is an upstream that records what it receives; block, when not
// nil, holds each request until it is closed.
type mirrorRecorder struct {
	mu    sync.Mutex
	got   []seen
	block chan struct{}
	srv   *httptest.Server
}

func startMirrorRecorder(t testing.TB, block chan struct{}) *mirrorRecorder {
	t.Helper()
	rc := &mirrorRecorder{block: block}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.got = append(rc.got, seen{id: r.Header.Get("X-Request-Id"), body: string(b),
			mirror: r.Header.Get("X-Dwara-Mirror"), upstream: r.Header.Get("X-Dwara-Upstream")})
		rc.mu.Unlock()
		if rc.block != nil {
			select {
			case <-rc.block:
			case <-r.Context().Done():
			}
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *mirrorRecorder) addr() string { return strings.TrimPrefix(rc.srv.URL, "http://") }

func (rc *mirrorRecorder) seen() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.got)
}

// waitSeen waits until rc has received n requests, at most 10 s.
func (rc *mirrorRecorder) waitSeen(t testing.TB, n int) []seen {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := rc.seen()
		if len(s) >= n || time.Now().After(deadline) {
			return s
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mirrorSpec is a spec of service web on upstream real mirrored to
// upstream shadow.
func mirrorSpec(real, shadow string, percent float64, extra string) string {
	return fmt.Sprintf(`upstreams:
  - {name: real, endpoints: [%q]}
  - {name: shadow, endpoints: [%q]}
services:
  - name: web
    upstream: real
    mirror: {upstream: shadow, percent: %g%s}
`, real, shadow, percent, extra)
}

func post(t testing.TB, url, id, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("X-Request-Id", id)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", id, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// fronts runs f on each front (eachFront), the subtests in parallel, with
// start starting a gateway on that front, closed when the test ends.
func fronts(t *testing.T, f func(t *testing.T, start func(t testing.TB) *gateway)) {
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		f(t, func(t testing.TB) *gateway {
			g := startGateway(t, front)
			t.Cleanup(g.Close)
			return g
		})
	})
}

func mirrorCount(g *gateway, outcome string) float64 {
	return testutil.ToFloat64(g.m.mirrors.WithLabelValues("web", "shadow", outcome))
}

// TestMirrorShare: 2,000 POSTs with fixed request ids at 10%: the real
// upstream receives each exactly once with its body; the mirror receives
// exactly the ids mirrorHash chooses, a count inside the binomial 99.9%
// interval, each with the same body, X-Dwara-Mirror: 1, and X-Dwara-Upstream
// naming the mirror.
func TestMirrorShare(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, nil)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 10, ""))
		const n, pct = 2000, 0.10
		want := map[string]string{}
		for i := range n {
			id, body := fmt.Sprintf("mirror-%04d", i), fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", i%300))
			if resp := post(t, g.URL+"/x", id, body); resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
			if mirrorHash(id)%mirrorScale < 1000 {
				want[id] = body
			}
		}
		// Binomial(2000, 0.1): mean 200, sd 13.4; 99.9% two-sided: z 3.29.
		sd := math.Sqrt(n * pct * (1 - pct))
		lo, hi := int(n*pct-3.29*sd), int(math.Ceil(n*pct+3.29*sd))
		if len(want) < lo || len(want) > hi {
			t.Fatalf("the hash chose %d of %d, outside [%d, %d]", len(want), n, lo, hi)
		}
		got := shadow.waitSeen(t, len(want))
		time.Sleep(50 * time.Millisecond)
		got = shadow.seen()
		t.Logf("mirrored %d of %d (99.9%% interval [%d, %d])", len(got), n, lo, hi)
		if len(got) != len(want) {
			t.Fatalf("mirror received %d, want %d", len(got), len(want))
		}
		for _, s := range got {
			if b, ok := want[s.id]; !ok || b != s.body || s.mirror != "1" || s.upstream != "shadow" {
				t.Fatalf("mirror got %q (mirror %q, upstream %q, body %d bytes), want one of the chosen with its body", s.id, s.mirror, s.upstream, len(s.body))
			}
		}
		reals := real.seen()
		if len(reals) != n {
			t.Fatalf("real upstream received %d, want %d", len(reals), n)
		}
		ids := map[string]bool{}
		for _, s := range reals {
			var i int
			fmt.Sscanf(s.id, "mirror-%04d", &i)
			if ids[s.id] || s.mirror != "" || s.upstream != "real" || s.body != fmt.Sprintf("body-%d-%s", i, strings.Repeat("x", i%300)) {
				t.Fatalf("real upstream: %q twice, or changed (mirror %q, upstream %q, body %q)", s.id, s.mirror, s.upstream, s.body)
			}
			ids[s.id] = true
		}
		if c := mirrorCount(g, mirrorSent); c != float64(len(want)) {
			t.Errorf("sent = %v, want %d", c, len(want))
		}
	})
}

// TestMirrorIndependentOfSplit: the mirror's choice does not follow the
// split's branch: among keys of each branch of a 50/50 split, the share
// mirrored at 10% is the same within noise.
func TestMirrorIndependentOfSplit(t *testing.T) {
	m := &mirror{threshold: 1000}
	var count, mirrored [2]int
	for i := range 100_000 {
		key := fmt.Sprintf("k-%d", i)
		b := splitHashForTest(key) % 2
		count[b]++
		if m.chosen(key) {
			mirrored[b]++
		}
	}
	for b := range 2 {
		share := float64(mirrored[b]) / float64(count[b])
		if math.Abs(share-0.1) > 0.006 { // sd 0.0013 per branch
			t.Errorf("branch %d: %.4f mirrored, want 0.1", b, share)
		}
	}
}

// TestMirrorSlowDoesNotDelay: a mirror that never answers until the test
// lets it leaves the real requests alone: they are all answered 200 while
// the mirror's handler is still blocked.
func TestMirrorSlowDoesNotDelay(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		release := make(chan struct{})
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, release)
		defer close(release)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ""))
		for i := range 50 {
			if resp := post(t, g.URL+"/x", fmt.Sprintf("slow-%d", i), "payload"); resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		if n := len(shadow.waitSeen(t, mirrorWorkers)); n < 1 {
			t.Fatal("the mirror received nothing")
		}
		// Every real request completed while every copy was still held.
		if s := mirrorCount(g, mirrorSent); s != 0 {
			t.Fatalf("%v copies answered, but the mirror is blocked", s)
		}
		if n := len(real.seen()); n != 50 {
			t.Fatalf("real upstream received %d, want 50", n)
		}
	})
}

// TestMirrorQueueFull: with the mirror blocked, copies beyond the workers
// and the queue are dropped and counted; the real requests are all 200.
func TestMirrorQueueFull(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		release := make(chan struct{})
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, release)
		defer close(release)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ""))
		const n = mirrorQueueSize + mirrorWorkers + 200
		for i := range n {
			req, _ := http.NewRequest(http.MethodGet, g.URL+"/x", nil)
			req.Header.Set("X-Request-Id", fmt.Sprintf("q-%d", i))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		// A copy that timed out meanwhile (a busy machine) freed its
		// worker for one more: that many fewer are dropped.
		d := mirrorCount(g, mirrorDropped)
		ended := mirrorCount(g, mirrorTimeout) + mirrorCount(g, mirrorFailed)
		t.Logf("dropped %v of %d, %v ended while blocked", d, n, ended)
		if d < 200-ended || d > n-mirrorQueueSize {
			t.Errorf("dropped = %v with %v ended, want %v..%d", d, ended, 200-ended, n-mirrorQueueSize)
		}
	})
}

// TestMirrorAbsent: a mirror on a closed port counts failed and never
// fails the real request.
func TestMirrorAbsent(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		real := startMirrorRecorder(t, nil)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), closed, 100, ""))
		for i := range 20 {
			if resp := post(t, g.URL+"/x", fmt.Sprintf("absent-%d", i), "b"); resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
		testrun.Eventually(t, "20 failed mirror copies counted", func() bool { return mirrorCount(g, mirrorFailed) >= 20 })
		if f := mirrorCount(g, mirrorFailed); f != 20 {
			t.Errorf("failed = %v, want 20", f)
		}
		// The real upstream's endpoint state never saw the copies.
		if ej := testutil.ToFloat64(g.um.ejections.WithLabelValues("shadow")); ej != 0 {
			t.Errorf("mirror failures ejected %v endpoints", ej)
		}
	})
}

// TestMirrorBodyCap: a body over max_body_bytes, or of unknown length, is
// not mirrored (body_too_large) and reaches the real upstream whole.
func TestMirrorBodyCap(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, nil)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ", max_body_bytes: 10"))
		big := strings.Repeat("y", 11)
		if resp := post(t, g.URL+"/x", "big", big); resp.StatusCode != 200 {
			t.Fatal(resp.StatusCode)
		}
		// Unknown length: chunked.
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/x", io.MultiReader(strings.NewReader("chunk")))
		req.Header.Set("X-Request-Id", "chunked")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp := post(t, g.URL+"/x", "small", "0123456789"); resp.StatusCode != 200 {
			t.Fatal(resp.StatusCode)
		}
		got := shadow.waitSeen(t, 1)
		if len(got) != 1 || got[0].id != "small" || got[0].body != "0123456789" {
			t.Errorf("mirror got %+v, want only small", got)
		}
		if c := mirrorCount(g, mirrorBodyTooLarge); c != 2 {
			t.Errorf("body_too_large = %v, want 2", c)
		}
		reals := real.seen()
		if len(reals) != 3 || reals[0].body != big || reals[1].body != "chunk" {
			t.Errorf("real upstream got %+v", reals)
		}
	})
}

// TestMirrorMetricsDeleted: a generation without the mirror deletes its
// series.
func TestMirrorMetricsDeleted(t *testing.T) {
	eachFront(t, func(t *testing.T, front string) {
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, nil)
		g := startGateway(t, front)
		t.Cleanup(g.Close)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ""))
		post(t, g.URL+"/x", "m-1", "b")
		if len(g.samples(t, "dwara_mirror_requests_total")) != 5 {
			t.Fatalf("want 5 series, got %v", g.samples(t, "dwara_mirror_requests_total"))
		}
		g.apply(t, 2, fmt.Sprintf("upstreams: [{name: real, endpoints: [%q]}]\nservices: [{name: web, upstream: real}]\n", real.addr()))
		if s := g.samples(t, "dwara_mirror_requests_total"); len(s) != 0 {
			t.Errorf("series left after the mirror was removed: %v", s)
		}
	})
}

// TestMirrorValidation: unknown upstream, the service's own target,
// percent and max_body_bytes out of range are refused with their paths;
// an absent max_body_bytes is the default and an explicit 0 stays 0.
func TestMirrorValidation(t *testing.T) {
	base := func(m string) string {
		return "upstreams: [{name: a, endpoints: [\"127.0.0.1:1\"]}, {name: b, endpoints: [\"127.0.0.1:2\"]}]\n" +
			"services: [{name: web, upstream: a, mirror: " + m + "}]\n"
	}
	for _, c := range []struct{ mirror, want string }{
		{"{upstream: c, percent: 10}", `services[0].mirror.upstream: unknown upstream "c"`},
		{"{upstream: a, percent: 10}", `services[0].mirror.upstream: upstream "a" is a target of this service`},
		{"{upstream: b, percent: 0}", "services[0].mirror.percent: must be in (0, 100], got 0"},
		{"{upstream: b, percent: 100.5}", "services[0].mirror.percent: must be in (0, 100]"},
		{"{upstream: b, percent: 0.001}", "services[0].mirror.percent: must be a multiple of 0.01"},
		{"{upstream: b, percent: 10, max_body_bytes: -1}", "services[0].mirror.max_body_bytes: must be 0..10485760, got -1"},
		{"{upstream: b, percent: 10, max_body_bytes: 10485761}", "services[0].mirror.max_body_bytes: must be 0..10485760"},
		{"{upstream: b, percent: 10, extra: 1}", "extra"},
	} {
		_, err := config.Parse([]byte(base(c.mirror)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.mirror, err, c.want)
		}
	}
	s, err := config.Parse([]byte(base("{upstream: b, percent: 0.5}")))
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Services[0].Mirror; m.MaxBodyBytes != config.DefaultMirrorMaxBodyBytes || m.Percent != 0.5 {
		t.Errorf("defaults: %+v", m)
	}
	s, err = config.Parse([]byte(base("{upstream: b, percent: 100, max_body_bytes: 0}")))
	if err != nil {
		t.Fatal(err)
	}
	if m := s.Services[0].Mirror; m.MaxBodyBytes != 0 {
		t.Errorf("explicit 0: %+v", m)
	}
	// An explicit 0 survives a JSON round trip (the spec as stored).
	js, _ := json.Marshal(s)
	if rs, err := config.Parse(js); err != nil || rs.Services[0].Mirror.MaxBodyBytes != 0 {
		t.Errorf("round trip of %s: %v", js, err)
	}
	c := s.Clone()
	if c.Services[0].Mirror == s.Services[0].Mirror {
		t.Error("Clone shares the mirror")
	}
	d := config.Diff(s, mustParse(t, base("{upstream: b, percent: 50, max_body_bytes: 0}")))
	if !strings.Contains(fmt.Sprint(d), "mirror percent 100->50") {
		t.Errorf("diff: %+v", d)
	}
}

func splitHashForTest(key string) uint64 { return split.Hash(key) }

// TestMirrorLargeBody: a body near the default cap, which the fasthttp
// front streams, reaches both the real upstream and the mirror whole.
func TestMirrorLargeBody(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, nil)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ""))
		for i := range 5 {
			body := strings.Repeat(fmt.Sprintf("%d-abcdefgh", i), 6000)[:60000]
			if resp := post(t, g.URL+"/x", fmt.Sprintf("large-%d", i), body); resp.StatusCode != 200 {
				t.Fatal(resp.StatusCode)
			}
			got := shadow.waitSeen(t, i+1)
			if len(got) != i+1 || got[i].body != body || real.seen()[i].body != body {
				t.Fatalf("request %d: the mirror or the real upstream got a different body", i)
			}
		}
	})
}

// BenchmarkMirror measures real requests with no mirror (off) and with a
// 100% mirror whose every answer takes 2 s (on: the copies fill the queue
// and the rest are dropped), reporting each one's p50 latency.
func BenchmarkMirror(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			real := startMirrorRecorder(b, nil)
			slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				select {
				case <-time.After(2 * time.Second):
				case <-r.Context().Done():
				}
			}))
			b.Cleanup(slow.Close)
			g := startGateway(b, *benchFront)
			b.Cleanup(g.Close)
			spec := fmt.Sprintf("upstreams: [{name: real, endpoints: [%q]}, {name: shadow, endpoints: [%q]}]\nservices: [{name: web, upstream: real}]\n",
				real.addr(), strings.TrimPrefix(slow.URL, "http://"))
			if mode == "on" {
				spec = mirrorSpec(real.addr(), strings.TrimPrefix(slow.URL, "http://"), 100, "")
			}
			g.apply(b, 1, spec)
			var lat []time.Duration
			i := 0
			for b.Loop() {
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/x", strings.NewReader("payload-of-some-bytes"))
				req.Header.Set("X-Request-Id", fmt.Sprintf("bench-%d", i))
				i++
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatal(resp.StatusCode)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
