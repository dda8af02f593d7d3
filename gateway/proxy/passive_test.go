package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/testnet"
)

// upstreamSpec is a spec with upstream u over endpoints (with extra
// settings in YAML flow syntax, "" for none) serving service web on "/".
func upstreamSpec(extra string, endpoints ...string) string {
	quoted := make([]string, len(endpoints))
	for i, e := range endpoints {
		quoted[i] = `"` + e + `"`
	}
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf("upstreams: [{name: u, endpoints: [%s]%s}]\nservices: [{name: web, upstream: u}]\n",
		strings.Join(quoted, ", "), extra)
}

// counted returns dwara_upstream_retries_total and
// dwara_upstream_ejections_total of upstream name.
func (g *gateway) counted(name string) (retries, ejections float64) {
	return testutil.ToFloat64(g.um.retries.WithLabelValues(name)),
		testutil.ToFloat64(g.um.ejections.WithLabelValues(name))
}

// statusUpstream answers every request with the status it holds (200 at
// first) and X-Pool: name, and counts them.
type statusUpstream struct {
	addr   string
	status atomic.Int64
	served atomic.Int64
}

func startStatusUpstream(t *testing.T, name string, status int) *statusUpstream {
	t.Helper()
	u := &statusUpstream{}
	u.status.Store(int64(status))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.served.Add(1)
		w.Header().Set("X-Pool", name)
		w.WriteHeader(int(u.status.Load()))
		fmt.Fprint(w, name)
	}))
	t.Cleanup(srv.Close)
	u.addr = strings.TrimPrefix(srv.URL, "http://")
	return u
}

// TestPassiveEjectsClosedPort: an endpoint whose port is closed fails
// requests until the third failure in a row ejects it (not before); every
// failed request is retried on the other endpoint, so no GET fails.
func TestPassiveEjectsClosedPort(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		good := startPool(t, "good", 1)
		dead := testnet.ClosedAddr(t)
		g := startGateway(t, front)
		g.apply(t, 1, upstreamSpec("", dead, good.Addrs[0]))
		const n = 40
		ejectedAt := -1.0
		for i := range n {
			resp, _ := get(t, client, g.URL+"/", nil)
			if resp.StatusCode != 200 {
				t.Fatalf("GET %d: %d, want 200 (retried on the live endpoint)", i, resp.StatusCode)
			}
			retries, ejections := g.counted("u")
			switch {
			case retries < 3 && ejections != 0:
				t.Fatalf("ejected after %v failures, want 3", retries)
			case ejections >= 1 && ejectedAt < 0:
				ejectedAt = retries
			}
		}
		if ejectedAt != 3 {
			t.Errorf("ejected after %v failures, want 3", ejectedAt)
		}
		if got := good.Hits(0); got != n {
			t.Errorf("the live endpoint served %d requests, want all %d", got, n)
		}
	})
}

// TestPassiveNeverEjectsWholeUpstream: with every endpoint failing, the
// passive checks eject at most one of two and never a lone endpoint, so
// the clients keep getting 502 problem+json rather than a silent outage
// (or a failover that hides it).
func TestPassiveNeverEjectsWholeUpstream(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("two endpoints", func(t *testing.T) {
			t.Parallel()
			a, b := testnet.ClosedAddr(t), testnet.ClosedAddr(t)
			g := startGateway(t, front)
			g.apply(t, 1, upstreamSpec("", a, b))
			sa, sb := g.Registry().Get(a), g.Registry().Get(b)
			for i := range 30 {
				resp, body := get(t, client, g.URL+"/", nil)
				if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/problem+json" {
					t.Fatalf("GET %d: %d %q, want 502 problem+json", i, resp.StatusCode, body)
				}
				if sa.Ejected() && sb.Ejected() {
					t.Fatalf("GET %d: both endpoints ejected", i)
				}
			}
			if _, ejections := g.counted("u"); ejections < 1 {
				t.Errorf("dwara_upstream_ejections_total = %v, want one endpoint ejected", ejections)
			}
		})
		t.Run("one endpoint", func(t *testing.T) {
			t.Parallel()
			dead := testnet.ClosedAddr(t)
			g := startGateway(t, front)
			g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", dead))
			for i := range 10 {
				if resp, body := get(t, client, g.URL+"/", nil); resp.StatusCode != 502 {
					t.Fatalf("GET %d: %d %q, want 502", i, resp.StatusCode, body)
				}
			}
			if _, ejections := g.counted("u"); ejections != 0 || !g.Registry().Get(dead).Up() {
				t.Errorf("a lone endpoint was ejected (%v ejections)", ejections)
			}
		})
	})
}

// TestPassiveEjectionCap checks the cap on a compiled table: at most half
// of an upstream's endpoints, never the last one up (the others may be
// down by the active checks), and in every upstream naming the address.
func TestPassiveEjectionCap(t *testing.T) {
	t.Parallel()
	p := New(Options{})
	defer p.Close()
	spec := mustParse(t, `
upstreams:
  - {name: four, endpoints: ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"]}
  - {name: two, endpoints: ["10.0.0.4:80", "10.0.0.5:80"]}
  - {name: pair, endpoints: ["10.0.0.6:80", "10.0.0.7:80"]}
services:
  - {name: a, base_path: /a, upstream: four}
  - {name: b, base_path: /b, upstream: two}
  - {name: c, base_path: /c, upstream: pair}
`)
	if err := p.Apply(spec, 1); err != nil {
		t.Fatal(err)
	}
	tbl := p.table.Load()
	four, two, pair := tbl.upstreams["four"], tbl.upstreams["two"], tbl.upstreams["pair"]
	eject := func(u *upstream, i int) bool {
		before := testutil.ToFloat64(p.um.ejections.WithLabelValues(u.name))
		p.eject(u, u.endpoints[i], 3, "test")
		return testutil.ToFloat64(p.um.ejections.WithLabelValues(u.name)) > before
	}
	// 10.0.0.5 ejected: "two" has its one ejection, so 10.0.0.4 (in both
	// "four" and "two") may not go, though "four" would allow it.
	if !eject(two, 1) {
		t.Fatal("first ejection in two refused")
	}
	if eject(four, 3) {
		t.Error("ejected the last endpoint up of upstream two through upstream four")
	}
	if !eject(four, 0) || !eject(four, 1) {
		t.Fatal("ejections 1 and 2 of 4 refused")
	}
	if eject(four, 2) {
		t.Error("third ejection of 4 allowed, want at most half")
	}
	if eject(four, 0) {
		t.Error("an ejected endpoint was ejected again")
	}
	// The active checks hold one of pair down: the other is the last up.
	pair.endpoints[0].state.SetUp(false)
	if eject(pair, 1) {
		t.Error("ejected the last endpoint up of pair")
	}
}

// TestPassiveConsecutive5xx: with passive.consecutive_5xx: 2, two 500s in
// a row eject the endpoint; without it, 5xx answers never do. 5xx answers
// are passed on, not retried.
func TestPassiveConsecutive5xx(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, tc := range []struct {
			name  string
			extra string
			want  float64 // ejections after the endpoint's second 500
		}{
			{"configured", "passive: {consecutive_5xx: 2}", 1},
			{"absent", "", 0},
			{"zero", "passive: {consecutive_5xx: 0}", 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				bad := startStatusUpstream(t, "bad", http.StatusInternalServerError)
				good := startStatusUpstream(t, "good", http.StatusOK)
				g := startGateway(t, front)
				g.apply(t, 1, upstreamSpec(tc.extra, bad.addr, good.addr))
				// Round robin: bad, good, bad.
				for i, want := range []int{500, 200, 500} {
					if resp, _ := get(t, client, g.URL+"/", nil); resp.StatusCode != want {
						t.Fatalf("GET %d: %d, want %d", i, resp.StatusCode, want)
					}
					if _, ej := g.counted("u"); i < 2 && ej != 0 {
						t.Fatalf("ejected after %d answers", i+1)
					}
				}
				retries, ejections := g.counted("u")
				if ejections != tc.want || retries != 0 {
					t.Errorf("%v ejections, %v retries after two 500s; want %v, 0", ejections, retries, tc.want)
				}
			})
		}
	})
}

// TestPassiveUpgradeFailures: the failures of upgrade requests count for
// the passive checks as well (they are not retried).
func TestPassiveUpgradeFailures(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		good := startPool(t, "good", 1)
		dead := testnet.ClosedAddr(t)
		g := startGateway(t, front)
		g.apply(t, 1, upstreamSpec("", dead, good.Addrs[0]))
		hdr := map[string]string{"Connection": "Upgrade", "Upgrade": "test"}
		failed := 0
		for i := 0; failed < 3; i++ {
			if i == 20 {
				t.Fatalf("only %d of 20 upgrade requests reached the closed port", failed)
			}
			if _, ej := g.counted("u"); ej != 0 {
				t.Fatalf("ejected after %d failures, want 3", failed)
			}
			resp, _ := get(t, client, g.URL+"/", hdr)
			if resp.StatusCode == 502 {
				failed++
			}
		}
		if retries, ejections := g.counted("u"); ejections != 1 || retries != 0 {
			t.Errorf("%v ejections, %v retries after 3 failed upgrades; want 1, 0", ejections, retries)
		}
	})
}

// TestPassiveBookkeepingAllocs guards the per-request work of the passive
// checks and the retry bookkeeping: none of it allocates.
func TestPassiveBookkeepingAllocs(t *testing.T) {
	p := New(Options{})
	defer p.Close()
	if err := p.Apply(mustParse(t, upstreamSpec("passive: {consecutive_5xx: 5}", "10.0.0.1:80", "10.0.0.2:80")), 1); err != nil {
		t.Fatal(err)
	}
	u := p.table.Load().upstreams["u"]
	ep := u.endpoints[0]
	allocs := testing.AllocsPerRun(1000, func() {
		a := newAttempt(ep, time.Now())
		p.Answered(u, a.Endpoint, 200)
		if next := u.untried(a.tried); next == nil {
			t.Fatal("no endpoint to retry on")
		}
		a.end(u, false, time.Now())
	})
	if allocs != 0 {
		t.Errorf("passive bookkeeping allocates %.1f times per request, want 0", allocs)
	}
}

// TestRetryAndEjectionSeriesOfRemovedUpstreams: the retry and ejection
// series of an upstream that a new generation no longer has are deleted.
func TestRetryAndEjectionSeriesOfRemovedUpstreams(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g := startGateway(t, front)
		series := func() map[string]bool {
			out := map[string]bool{}
			for _, s := range g.samples(t, "dwara_upstream_retries_total", "dwara_upstream_ejections_total") {
				out[s.name+"/"+s.labels["upstream"]] = true
			}
			return out
		}
		g.apply(t, 1, `
upstreams: [{name: a, endpoints: ["10.0.0.1:80"]}, {name: b, endpoints: ["10.0.0.2:80"]}]
services: [{name: web, split: {targets: [{upstream: a}, {upstream: b}]}}]
`)
		if got := series(); len(got) != 4 {
			t.Fatalf("series %v, want retries and ejections of a and b", got)
		}
		g.apply(t, 2, upstreamSpec("", "10.0.0.1:80"))
		if got := series(); len(got) != 2 || !got["dwara_upstream_retries_total/u"] {
			t.Errorf("series %v, want only upstream u's", got)
		}
	})
}
