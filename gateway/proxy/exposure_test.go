package proxy

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// recordingSink keeps every exposure it is given.
type recordingSink struct {
	mu   sync.Mutex
	list []Exposure
}

func (s *recordingSink) Expose(e Exposure) {
	s.mu.Lock()
	s.list = append(s.list, e)
	s.mu.Unlock()
}

func (s *recordingSink) take() []Exposure {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.list
	s.list = nil
	return l
}

// exposureGateway is a gateway on front whose exposures go to sink,
// sampled at rate.
func exposureGateway(t testing.TB, front string, sink ExposureSink, rate float64) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg, Exposures: sink, ExposureSampleRate: rate})
	return &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
}

func hashOf(key string) [8]byte {
	sum := sha256.Sum256([]byte(key))
	return [8]byte(sum[:8])
}

// TestExposureSticky: every new session of a sticky 75/25 split is one
// exposure with the branch that answered, the generation, the share in
// force and the hash of the minted handle; a returning session is none.
func TestExposureSticky(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		sink := &recordingSink{}
		g := exposureGateway(t, front, sink, 0)
		g.apply(t, 3, spectest.SplitOver([]*demo.Pool{a, b}, 75, 25).Sticky("sid", 0).YAML())

		byHandle := map[[8]byte]string{}
		var handles []string
		for i := range 200 {
			resp, _ := get(t, client, g.URL+"/", nil)
			c := resp.Cookies()
			if resp.StatusCode != http.StatusOK || len(c) != 1 {
				t.Fatalf("request %d: %d, cookies %v", i, resp.StatusCode, c)
			}
			byHandle[hashOf(c[0].Value)] = resp.Header.Get("X-Pool")
			handles = append(handles, c[0].Value)
		}
		// Returning sessions are no new assignment.
		for _, h := range handles[:20] {
			get(t, client, g.URL+"/", map[string]string{"Cookie": "sid=" + h})
		}
		got := sink.take()
		if len(got) != 200 {
			t.Fatalf("%d exposures, want 200", len(got))
		}
		share := map[string]float64{"a": 0.75, "b": 0.25}
		for _, e := range got {
			pool, ok := byHandle[e.KeyHash]
			switch {
			case !ok:
				t.Fatalf("exposure %+v: key hash of no handle minted", e)
			case e.Branch != pool || e.Generation != 3 || e.Service != "web" || e.Reason != ExposureSticky || e.Share != share[pool]:
				t.Fatalf("exposure %+v, want branch %s (share %v) of web in generation 3, sticky", e, pool, share[pool])
			case e.At == 0:
				t.Fatalf("exposure %+v has no time", e)
			}
		}
	})
}

// TestExposureForcedAndSampled: forced picks are recorded with reason
// forced (the weight-0 branch with share 0); request-keyed picks are all
// recorded at rate 1, none at rate 0, and about the rate in between.
func TestExposureForcedAndSampled(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		spec := spectest.SplitOver([]*demo.Pool{a, b}, 100, 0).
			Edit(func(s *config.Spec) { s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"} }).YAML()

		for _, rate := range []float64{0, 1, 0.25} {
			t.Run(fmt.Sprint(rate), func(t *testing.T) {
				sink := &recordingSink{}
				g := exposureGateway(t, front, sink, rate)
				g.apply(t, 1, spec)
				const n = 400
				for i := range n {
					id := fmt.Sprintf("req-%d", i)
					if resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": id}); resp.StatusCode != 200 {
						t.Fatalf("request %d: %d", i, resp.StatusCode)
					}
				}
				got := sink.take()
				for _, e := range got {
					if e.Reason != ExposureRequest || e.Branch != "a" || e.Share != 1 || e.Generation != 1 {
						t.Fatalf("sampled exposure %+v", e)
					}
				}
				switch rate {
				case 0:
					if len(got) != 0 {
						t.Errorf("rate 0: %d exposures, want none", len(got))
					}
				case 1:
					if len(got) != n {
						t.Errorf("rate 1: %d exposures, want %d", len(got), n)
					}
					for i, e := range got {
						if want := hashOf(fmt.Sprintf("req-%d", i)); e.KeyHash != want {
							t.Fatalf("exposure %d: key hash %x, want %x", i, e.KeyHash, want)
						}
					}
				default:
					if len(got) < n/8 || len(got) > n/2 {
						t.Errorf("rate %v: %d exposures of %d", rate, len(got), n)
					}
				}

				// Forced picks: every one, whatever the rate.
				for i := range 10 {
					if resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "b", "X-Request-Id": fmt.Sprintf("f-%d", i)}); resp.StatusCode != 200 {
						t.Fatalf("forced %d: %d", i, resp.StatusCode)
					}
				}
				get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "nope"}) // 400: no exposure
				forced := sink.take()
				if len(forced) != 10 {
					t.Fatalf("%d exposures of forced picks, want 10: %+v", len(forced), forced)
				}
				for i, e := range forced {
					if e.Reason != ExposureForced || e.Branch != "b" || e.Share != 0 || e.KeyHash != hashOf(fmt.Sprintf("f-%d", i)) {
						t.Fatalf("forced exposure %+v", e)
					}
				}
			})
		}
	})
}

// TestExposureQueueOverflow: a burst of new sessions far beyond the queue's
// capacity, with nobody draining it, drops the excess and counts it, and
// every request is still answered.
func TestExposureQueueOverflow(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 2)
		b := startPool(t, "b", 1)
		reg := prometheus.NewRegistry()
		q := NewExposureQueue(64, reg)
		g := exposureGateway(t, front, q, 1)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 1, 0).Sticky("sid", 0).YAML())

		const n = 2000
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < n; i += 8 {
					resp, err := client.Get(g.URL + "/")
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if codes[200] != n {
			t.Fatalf("answers %v, want %d x 200", codes, n)
		}
		if len(q.C()) != 64 {
			t.Errorf("queue holds %d, want 64 (full)", len(q.C()))
		}
		if d := testutil.ToFloat64(q.dropped); d != n-64 {
			t.Errorf("dwara_exposures_dropped_total = %v, want %d", d, n-64)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP dwara_exposures_dropped_total Exposure records lost: the queue was full, or the writer gave them up after a database error.
# TYPE dwara_exposures_dropped_total counter
dwara_exposures_dropped_total %d
`, n-64)), "dwara_exposures_dropped_total"); err != nil {
			t.Error(err)
		}
	})
}

// TestExposureNoAllocation: routing a new sticky session allocates the
// same with exposures recorded as without (the handle and its cookie),
// and a sampled request-keyed pick allocates nothing.
func TestExposureNoAllocation(t *testing.T) {
	a := startPool(t, "a", 1)
	b := startPool(t, "b", 1)
	sticky := mustParse(t, spectest.SplitOver([]*demo.Pool{a, b}, 1, 1).Sticky("sid", 0).YAML())
	plain := mustParse(t, spectest.SplitOver([]*demo.Pool{a, b}, 1, 1).YAML())
	allocs := func(q *ExposureQueue, spec *config.Spec) float64 {
		o := Options{ExposureSampleRate: 1}
		if q != nil {
			o.Exposures = q
		}
		p := New(o)
		defer p.Close()
		if err := p.Apply(spec, 1); err != nil {
			t.Fatal(err)
		}
		tb := p.table.Load()
		v := &Request{Method: "GET", Host: "x", Path: "/", RequestID: "0123456789abcdef0123456789abcdef", ClientIP: "127.0.0.1"}
		return testing.AllocsPerRun(1000, func() {
			if q != nil {
				select {
				case <-q.C():
				default:
				}
			}
			if rt := p.Route(tb, v); rt.Target == nil {
				t.Fatal("no route")
			}
		})
	}
	q := NewExposureQueue(16, nil)
	if off, on := allocs(nil, sticky), allocs(q, sticky); on != off {
		t.Errorf("sticky mint: %v allocations with exposures, %v without", on, off)
	}
	if on := allocs(q, plain); on != 0 {
		t.Errorf("sampled request pick: %v allocations, want 0", on)
	}
}

// BenchmarkExposures is BenchmarkProxyParallel over a sticky 95/5 split
// where every request starts a new session, with and without exposures
// recorded (into a queue drained as a writer would): the ratio of the two
// is what recording costs the proxy.
func BenchmarkExposures(b *testing.B) {
	stable := startPool(b, "stable", 2)
	can := startPool(b, "canary", 2)
	spec := spectest.SplitOver([]*demo.Pool{stable, can}, 95, 5).Sticky("sid", 0).YAML()
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			var g *gateway
			if on {
				q := NewExposureQueue(0, nil)
				done := make(chan struct{})
				go func() {
					for {
						select {
						case <-q.C():
						case <-done:
							return
						}
					}
				}()
				b.Cleanup(func() { close(done) })
				g = exposureGateway(b, *benchFront, q, DefaultExposureSampleRate)
			} else {
				g = startGateway(b, *benchFront)
			}
			g.apply(b, 1, spec)
			b.SetParallelism(16)
			b.ReportAllocs()
			b.ResetTimer() // not the queue's buffer
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

// BenchmarkExposeEnqueue is the cost of recording one exposure.
func BenchmarkExposeEnqueue(b *testing.B) {
	q := NewExposureQueue(0, nil)
	x := &exposures{sink: q}
	svc := &service{name: "web"}
	tg := &Target{Up: &upstream{name: "a"}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%DefaultExposureQueue == 0 {
			for len(q.ch) > 0 {
				<-q.ch
			}
		}
		x.expose(1, svc, tg, 0.5, "0123456789abcdef01234567", ExposureSticky)
	}
}
