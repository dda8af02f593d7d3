package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// The messages of health transitions, as gateway/health logs them.
const (
	logDown = "health check: endpoint down"
	logUp   = "health check: endpoint up"
)

// checkedUpstream is a loopback endpoint whose GET /healthz answers the
// status the test sets (200 at first) and counts the checks; every other
// request is answered 200 with X-Pool: name.
type checkedUpstream struct {
	name    string
	addr    string
	status  atomic.Int64
	checks  atomic.Int64
	served  atomic.Int64
	checked chan struct{} // a non-blocking signal per check
}

func startChecked(t *testing.T, name string) *checkedUpstream {
	t.Helper()
	u := &checkedUpstream{name: name, checked: make(chan struct{}, 1)}
	u.status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			u.checks.Add(1)
			w.WriteHeader(int(u.status.Load()))
			select {
			case u.checked <- struct{}{}:
			default:
			}
			return
		}
		u.served.Add(1)
		w.Header().Set("X-Pool", name)
		fmt.Fprint(w, name)
	}))
	t.Cleanup(srv.Close)
	u.addr = strings.TrimPrefix(srv.URL, "http://")
	return u
}

// startHealthGateway is startGateway with health checks every interval
// and a logger whose messages the test reads from the returned channel.
// The proxy is closed when the test ends, stopping its checkers.
func startHealthGateway(t *testing.T, interval time.Duration) (*gateway, <-chan string) {
	t.Helper()
	msgs := make(chan string, 4096)
	reg := prometheus.NewRegistry()
	p := New(Options{
		Metrics:        reg,
		Logger:         testlog.New(t, msgs),
		healthInterval: func(config.HealthCheck) time.Duration { return interval },
	})
	srv := httptest.NewServer(httpHandler(p))
	t.Cleanup(srv.Close)
	t.Cleanup(p.Close)
	return &gateway{Proxy: p, URL: srv.URL, reg: reg}, msgs
}

// checkedSpec is a spec with one upstream per group, each over its
// endpoints with health_check hc (YAML flow syntax, "" for none), and
// service "web" on "/" split evenly over the upstreams.
func checkedSpec(hc string, groups ...[]*checkedUpstream) string {
	var b strings.Builder
	b.WriteString("upstreams:\n")
	for i, g := range groups {
		addrs := make([]string, len(g))
		for j, u := range g {
			addrs[j] = strconv.Quote(u.addr)
		}
		fmt.Fprintf(&b, "  - {name: u%d, endpoints: [%s]", i, strings.Join(addrs, ", "))
		if hc != "" {
			fmt.Fprintf(&b, ", health_check: %s", hc)
		}
		b.WriteString("}\n")
	}
	if len(groups) == 1 {
		b.WriteString("services: [{name: web, upstream: u0}]\n")
		return b.String()
	}
	b.WriteString("services: [{name: web, split: {targets: [")
	for i := range groups {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{upstream: u%d, weight: 1}", i)
	}
	b.WriteString("]}}]\n")
	return b.String()
}

// servedBy sends n requests with distinct request ids and counts the
// answers by X-Pool; any answer but 200 fails the test.
func servedBy(t *testing.T, g *gateway, n int, tag string) map[string]int {
	t.Helper()
	by := map[string]int{}
	for i := range n {
		resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": fmt.Sprintf("%s-%d", tag, i)})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, resp.StatusCode)
		}
		by[resp.Header.Get("X-Pool")]++
	}
	return by
}

// endpointUp returns dwara_upstream_endpoint_up{upstream, endpoint}, or -1
// when the series is missing.
func endpointUp(t *testing.T, g *gateway, upstream, endpoint string) float64 {
	t.Helper()
	for _, s := range g.samples(t, "dwara_upstream_endpoint_up") {
		if s.labels["upstream"] == upstream && s.labels["endpoint"] == endpoint {
			return s.value
		}
	}
	return -1
}

// checkerGoroutines returns the ids of the goroutines running a health
// checker, sorted.
func checkerGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var ids []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "gateway/health.(*checker).run(") {
			id, _, _ := strings.Cut(strings.TrimPrefix(g, "goroutine "), " ")
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// waitCheckers waits until exactly n goroutines run a health checker and
// returns their ids. A checker has signalled its end when Apply or Close
// returns; its goroutine may need a moment more to return.
func waitCheckers(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(testrun.Timeout)
	for {
		ids := checkerGoroutines()
		if len(ids) == n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines run a health checker, want %d", len(ids), n)
		}
		runtime.Gosched()
	}
}

// TestHealthCheckAvoidsDownEndpoint fails one of two endpoints' checks: it
// is marked down after the unhealthy threshold, reported down, and gets no
// traffic; once its checks pass again it comes back after the healthy
// threshold and serves again.
func TestHealthCheckAvoidsDownEndpoint(t *testing.T) {
	t.Parallel()
	a, b := startChecked(t, "a"), startChecked(t, "b")
	g, logs := startHealthGateway(t, 5*time.Millisecond)
	g.apply(t, 1, checkedSpec("{path: /healthz, interval_s: 1, timeout_s: 1, healthy_threshold: 2, unhealthy_threshold: 2}", []*checkedUpstream{a, b}))
	testrun.Recv(t, a.checked, "a check of a")

	a.status.Store(http.StatusInternalServerError)
	testlog.Wait(t, logs, logDown)
	if g.Registry().Get(a.addr).Up() || !g.Registry().Get(b.addr).Up() {
		t.Fatalf("a up %v, b up %v; want a down, b up", g.Registry().Get(a.addr).Up(), g.Registry().Get(b.addr).Up())
	}
	if v := endpointUp(t, g, "u0", a.addr); v != 0 {
		t.Errorf("dwara_upstream_endpoint_up of a = %v, want 0", v)
	}
	before := a.served.Load()
	if by := servedBy(t, g, 100, "down"); by["b"] != 100 {
		t.Errorf("with a down: served by %v, want all 100 by b", by)
	}
	if n := a.served.Load() - before; n != 0 {
		t.Errorf("a served %d requests while down", n)
	}

	a.status.Store(http.StatusOK)
	testlog.Wait(t, logs, logUp)
	if v := endpointUp(t, g, "u0", a.addr); v != 1 {
		t.Errorf("dwara_upstream_endpoint_up of a = %v, want 1", v)
	}
	if by := servedBy(t, g, 100, "up"); by["a"] < 40 || by["b"] < 40 {
		t.Errorf("with a back: served by %v, want about half each", by)
	}
}

// TestHealthCheckFailsOverWholeTarget fails the checks of a split's canary
// (one endpoint): its share goes to the stable target with no error and
// dwara_split_failovers_total rises; when it recovers it takes its share
// again.
func TestHealthCheckFailsOverWholeTarget(t *testing.T) {
	t.Parallel()
	stable, canary := startChecked(t, "stable"), startChecked(t, "canary")
	g, logs := startHealthGateway(t, 5*time.Millisecond)
	g.apply(t, 1, checkedSpec("{path: /healthz, interval_s: 1, timeout_s: 1, healthy_threshold: 1, unhealthy_threshold: 3}",
		[]*checkedUpstream{stable}, []*checkedUpstream{canary}))
	testrun.Recv(t, canary.checked, "a check of the canary")

	canary.status.Store(http.StatusServiceUnavailable)
	testlog.Wait(t, logs, logDown)
	const n = 400
	if by := servedBy(t, g, n, "canary-down"); by["stable"] != n {
		t.Errorf("canary down: served by %v, want all %d by stable", by, n)
	}
	fo := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "u1"))
	if fo < n*0.4 || fo > n*0.6 {
		t.Errorf("dwara_split_failovers_total{upstream=u1} = %v, want about %d", fo, n/2)
	}

	canary.status.Store(http.StatusOK)
	testlog.Wait(t, logs, logUp)
	if by := servedBy(t, g, n, "canary-up"); by["canary"] < n*4/10 || by["stable"] < n*4/10 {
		t.Errorf("canary back: served by %v, want about half each", by)
	}
	if got := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "u1")); got != fo {
		t.Errorf("failovers rose from %v to %v with every target up", fo, got)
	}
}

// TestHealthCheckAcrossReloads reloads a generation whose checks mark one
// of two endpoints down. Reloads with the same settings keep the very same
// checker goroutines, send no check, and the endpoint stays down; a change
// of settings restarts its checker and keeps it down; removing
// health_check brings it up. Not parallel: it counts the process's checker
// goroutines.
func TestHealthCheckAcrossReloads(t *testing.T) {
	a, b := startChecked(t, "a"), startChecked(t, "b")
	a.status.Store(http.StatusInternalServerError)
	waitCheckers(t, 0)
	g, logs := startHealthGateway(t, time.Hour) // one check, at the start
	const hc = "{path: /healthz, interval_s: 5, timeout_s: 2, healthy_threshold: 1, unhealthy_threshold: 1}"
	spec := checkedSpec(hc, []*checkedUpstream{a, b})
	g.apply(t, 1, spec)
	testlog.Wait(t, logs, logDown)
	testrun.Recv(t, b.checked, "the first check of b")
	ids := waitCheckers(t, 2)

	for gen := int64(2); gen <= 50; gen++ {
		g.apply(t, gen, spec)
	}
	if got := checkerGoroutines(); !slices.Equal(got, ids) {
		t.Errorf("checker goroutines %v after reloads with the same settings, want the same %v", got, ids)
	}
	if a.checks.Load() != 1 || b.checks.Load() != 1 {
		t.Errorf("checks sent: a %d, b %d; want 1 each (no burst on reload)", a.checks.Load(), b.checks.Load())
	}
	if g.Registry().Get(a.addr).Up() {
		t.Fatal("a came up on a reload")
	}
	if by := servedBy(t, g, 50, "reloaded"); by["b"] != 50 {
		t.Errorf("after reloads: served by %v, want all by b", by)
	}

	// A change of settings restarts the checkers, which check at once; a
	// stays down, now held by its new checker.
	g.apply(t, 51, checkedSpec(strings.Replace(hc, "timeout_s: 2", "timeout_s: 3", 1), []*checkedUpstream{a, b}))
	testrun.Recv(t, b.checked, "a check of b by its new checker")
	got := waitCheckers(t, 2)
	all := append(slices.Clone(got), ids...)
	slices.Sort(all)
	if len(slices.Compact(all)) != 4 {
		t.Errorf("checker goroutines %v after a change of settings, want two new ones (were %v)", got, ids)
	}
	if g.Registry().Get(a.addr).Up() {
		t.Fatal("a came up when its check settings changed")
	}
	if v := endpointUp(t, g, "u0", a.addr); v != 0 {
		t.Errorf("dwara_upstream_endpoint_up of a = %v, want 0", v)
	}

	// Without health_check nothing holds a down.
	g.apply(t, 52, checkedSpec("", []*checkedUpstream{a, b}))
	waitCheckers(t, 0)
	if !g.Registry().Get(a.addr).Up() {
		t.Fatal("a still down after health_check was removed")
	}
	if v := endpointUp(t, g, "u0", a.addr); v != 1 {
		t.Errorf("dwara_upstream_endpoint_up of a = %v, want 1", v)
	}
	if by := servedBy(t, g, 50, "unchecked"); by["a"] == 0 {
		t.Errorf("without health_check: served by %v, want a to serve again", by)
	}
}

// TestHealthCheckReloadsLeakNothing applies two generations alternately
// 1,000 times, both declaring health checks: one upstream's check is the
// same in both, one's path changes every time, one upstream comes and
// goes. The unchanged checker sends its one check only; the checker
// goroutines are exactly those declared, none after Close, and no other
// goroutine is left. Not parallel: it counts the process's goroutines.
func TestHealthCheckReloadsLeakNothing(t *testing.T) {
	kept, changing, coming := startChecked(t, "kept"), startChecked(t, "changing"), startChecked(t, "coming")
	g, _ := startHealthGateway(t, time.Hour)
	spec := func(path string, withComing bool) string {
		hc := "{path: " + path + ", interval_s: 1, timeout_s: 1, healthy_threshold: 2, unhealthy_threshold: 2}"
		var b strings.Builder
		fmt.Fprintf(&b, "upstreams:\n  - {name: kept, endpoints: [%q], health_check: {path: /healthz, interval_s: 1, timeout_s: 1}}\n", kept.addr)
		fmt.Fprintf(&b, "  - {name: changing, endpoints: [%q], health_check: %s}\n", changing.addr, hc)
		targets := "{upstream: kept}, {upstream: changing}"
		if withComing {
			fmt.Fprintf(&b, "  - {name: coming, endpoints: [%q], health_check: %s}\n", coming.addr, hc)
			targets += ", {upstream: coming}"
		}
		fmt.Fprintf(&b, "services: [{name: web, split: {targets: [%s]}}]\n", targets)
		return b.String()
	}
	genA, genB := mustParse(t, spec("/healthz", true)), mustParse(t, spec("/ready", false))
	waitCheckers(t, 0)
	if err := g.Apply(genA, 1); err != nil {
		t.Fatal(err)
	}
	servedBy(t, g, 30, "warm") // the connections to the upstreams exist before the count
	testrun.Recv(t, kept.checked, "the first check of the kept upstream")
	ignore := goleak.IgnoreCurrent()
	before := runtime.NumGoroutine()
	start := time.Now()
	for i := range 1000 {
		s := genB
		if i%2 == 1 {
			s = genA
		}
		if err := g.Apply(s, int64(i+2)); err != nil {
			t.Fatalf("reload %d: %v", i+1, err)
		}
	}
	elapsed := time.Since(start)
	during := len(waitCheckers(t, 3)) // the last reload applied genA: three checkers
	g.Close()
	after := len(waitCheckers(t, 0))
	goleak.VerifyNone(t, ignore)
	t.Logf("1,000 reloads in %v; checker goroutines: %d after the reloads, %d after Close; all goroutines: %d before the reloads, %d after Close",
		elapsed, during, after, before, runtime.NumGoroutine())
	if n := kept.checks.Load(); n != 1 {
		t.Errorf("the unchanged checker sent %d checks, want 1", n)
	}
}
