package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
	"github.com/dwara/dwara/internal/teststat"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestFailoverBeforeDetection: a 90/10 split whose canary's only endpoint
// dies (its listener closed) before its health check can notice (the
// check's interval, scaled for the test, is 36 s): every request the
// split sends to the canary finds its connection refused, so it reached
// nothing, and goes at once to the stable target (counted in
// dwara_split_failovers_total), and under a bounded load no request fails
// from the moment the canary dies; nor once the checks, made fast, mark
// it down. When it is back and marked up, the request-keyed split is back
// at 90/10 (chi-square at p = 0.001 over fixed request ids), and a sticky
// session on the canary, which kept its cookie throughout, is on the
// canary again.
func TestFailoverBeforeDetection(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		stable := startPool(t, "stable", 2)
		canary := startPool(t, "canary", 1)
		reg := prometheus.NewRegistry()
		p := New(Options{
			Metrics: reg,
			// interval_s stands for tens of milliseconds.
			healthInterval: func(hc config.HealthCheck) time.Duration { return time.Duration(hc.IntervalS) * 10 * time.Millisecond },
		})
		t.Cleanup(p.Close)
		g := &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
		spec := func(intervalS int) string {
			return spectest.SplitOver([]*demo.Pool{stable, canary}, 90, 10).
				Split("app", "/app", spectest.T("stable", 90), spectest.T("canary", 10)).Sticky("sid", 0).
				Edit(func(s *config.Spec) {
					for i := range s.Upstreams {
						if s.Upstreams[i].Name == "canary" {
							s.Upstreams[i].HealthCheck = &config.HealthCheck{Path: "/healthz", IntervalS: intervalS, TimeoutS: 1, HealthyThreshold: 1, UnhealthyThreshold: 2}
						}
					}
				}).YAML()
		}
		g.apply(t, 1, spec(3600))
		state := p.Registry().Get(canary.Addrs[0])

		// A session the split keeps on the canary: new sessions until one
		// lands there (each does with p = 0.1; 300 all miss with p < 1e-13).
		var cookie string
		for i := 0; i < 300 && cookie == ""; i++ {
			resp, _ := get(t, client, g.URL+"/app/s", nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("new session: %d", resp.StatusCode)
			}
			if resp.Header.Get("X-Pool") == "canary" {
				cookie, _, _ = strings.Cut(resp.Header.Get("Set-Cookie"), ";")
			}
		}
		if cookie == "" {
			t.Fatal("no new session landed on the canary in 300")
		}
		session := func(want string) {
			t.Helper()
			resp, _ := get(t, client, g.URL+"/app/s", map[string]string{"Cookie": cookie})
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != want {
				t.Errorf("session %s: %d from %q, want 200 from %s", cookie, resp.StatusCode, resp.Header.Get("X-Pool"), want)
			}
			if sc := resp.Header.Values("Set-Cookie"); len(sc) > 0 {
				t.Errorf("session %s: the gateway set %q, want the cookie kept", cookie, sc)
			}
		}
		session("canary")

		canary.Close()
		served := load(t, g.URL+"/", "dead", 400)
		if served["canary"] != 0 || served["stable"] != 400 {
			t.Errorf("with the canary dead: served %v, want all 400 by stable", served)
		}
		session("stable")
		if !state.Up() {
			t.Fatal("the canary was marked down during the load: the test did not see the failover before detection")
		}
		// The canary's share of 400 request ids: about 40.
		if n := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "canary")); n < 10 {
			t.Errorf("dwara_split_failovers_total{web,canary} = %v, want the canary's share of the requests", n)
		}

		g.apply(t, 2, spec(1)) // checks every 10 ms from now on
		testrun.Eventually(t, "the canary marked down", func() bool { return !state.Up() })
		served = load(t, g.URL+"/", "down", 100)
		if served["stable"] != 100 {
			t.Errorf("with the canary marked down: served %v, want all 100 by stable", served)
		}
		session("stable")

		back, err := demo.StartPoolOn("canary", canary.Addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(back.Close)
		testrun.Eventually(t, "the canary marked up", state.Up)
		session("canary")
		const n = 2000
		served = load(t, g.URL+"/", "back", n)
		if served["stable"]+served["canary"] != n {
			t.Fatalf("with the canary back: served %v, want %d by stable and canary", served, n)
		}
		chi := teststat.ChiSquare([]int{served["stable"], served["canary"]}, []int{90, 10})
		if chi > teststat.Critical001[1] {
			t.Errorf("with the canary back: served %v, chi-square %.2f > %.3f (p = 0.001): not 90/10", served, chi, teststat.Critical001[1])
		}
		session("canary")
	})
}

// load sends n GETs to url from 4 clients at once, with the request ids
// prefix-0 .. prefix-(n-1), and returns how many each pool served (by
// its X-Pool field). Any answer other than 200 fails the test.
func load(t *testing.T, url, prefix string, n int) map[string]int {
	t.Helper()
	ids := make(chan string, n)
	for i := range n {
		ids <- fmt.Sprintf("%s-%d", prefix, i)
	}
	close(ids)
	var mu sync.Mutex
	served := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for id := range ids {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("X-Request-Id", id)
				resp, err := client.Do(req)
				if err != nil {
					t.Errorf("request %s: %v", id, err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %s: %d, want 200", id, resp.StatusCode)
				}
				mu.Lock()
				served[resp.Header.Get("X-Pool")]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return served
}

// TestFailoverRules: with one target's only endpoint dead, a request with
// a body fails over as a GET does (a refused connect reached nothing);
// a request forcing the dead target (the override header) is 502 and does
// not fail over; nor does one whose other target has weight 0, which the
// walk never picks.
func TestFailoverRules(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 50, 50).
			Edit(func(s *config.Spec) { s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"} }).
			Split("zero", "/zero", spectest.T("a", 1), spectest.T("b", 0)).YAML())
		a.Close()

		for i := range 40 {
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/post", strings.NewReader("hello"))
			req.Header.Set("X-Request-Id", fmt.Sprintf("p-%d", i))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != "b" {
				t.Errorf("POST p-%d: %d from %q, want 200 from b", i, resp.StatusCode, resp.Header.Get("X-Pool"))
			}
		}
		if n := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "a")); n < 5 {
			t.Errorf("dwara_split_failovers_total{web,a} = %v, want a's share of 40", n)
		}

		resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "a"})
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("forced to the dead a: %d from %q, want 502", resp.StatusCode, resp.Header.Get("X-Pool"))
		}
		resp, _ = get(t, client, g.URL+"/zero", nil)
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("a 1/0 split whose a is dead: %d from %q, want 502 (b has weight 0)", resp.StatusCode, resp.Header.Get("X-Pool"))
		}
	})
}

// TestFailoverRecordsTheCanary: in a canary group whose canary's only
// endpoint refuses connections, every request is answered 200 by the
// baseline, and each one that failed over is recorded as an error of the
// canary, so that its analysis still sees the canary fail.
func TestFailoverRecordsTheCanary(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.New().Upstream("a", a.Addrs...).Upstream("gone", testnet.ClosedAddr(t)).
			Split("web", "/", spectest.T("a", 90), spectest.T("gone", 10)).Analysis(withAnalysis).YAML())
		served := load(t, g.URL+"/", "rec", 200)
		if served["a"] != 200 {
			t.Fatalf("served %v, want all 200 by a", served)
		}
		failovers := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "gone"))
		base, can := delta(t, g, "web")
		if failovers < 5 || can.Requests != uint64(failovers) || can.Errors != uint64(failovers) {
			t.Errorf("canary recorded %d requests, %d errors; want one error per failover (%v)", can.Requests, can.Errors, failovers)
		}
		if base.Requests != 200 || base.Errors != 0 {
			t.Errorf("baseline recorded %d requests, %d errors; want 200, 0", base.Requests, base.Errors)
		}
	})
}
