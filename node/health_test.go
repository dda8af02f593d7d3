package node

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/split"
	"github.com/dwara/dwara/internal/testrun"
	"github.com/dwara/dwara/internal/teststat"
)

// The end-to-end evidence of the health checks: a serve process and a
// gateway replica following the same database, real loopback upstreams,
// health_check published through the API.

// fastCheck is the health_check of these tests: a check every second
// (the spec's minimum), one second for each, down after two failures in a
// row, up after one success.
func fastCheck() *config.HealthCheck {
	return &config.HealthCheck{Path: "/healthz", IntervalS: 1, TimeoutS: 1, HealthyThreshold: 1, UnhealthyThreshold: 2}
}

// The load: loadClients concurrent GET clients per process, each stopping
// at the load's stop, after loadMaxPerClient requests or after loadMaxTime,
// whichever comes first.
const (
	loadClients      = 8
	loadMaxPerClient = 50_000
	loadMaxTime      = 4 * wait
)

// outcome is how one GET of a load ended; the load counts outcomes.
type outcome struct {
	via      int    // index of the process the request went through
	phase    int32  // that process's phase (set by the test) when the request was sent
	status   int    // 0: no answer (transport error)
	pool     string // X-Pool of the answer
	endpoint string // X-Endpoint of the answer
	branch   int    // the target the split picks for the request id (0 without a split)
}

// load sends GETs with distinct request ids through each process's proxy
// and counts how they ended.
type load struct {
	phase    []atomic.Int32 // per process, read by its clients before each request
	progress chan struct{}  // receives (collapsed) after each request
	halt     func()         // stops the clients and waits for them

	mu     sync.Mutex
	counts map[outcome]int
	errs   []error // the first transport errors
}

// startLoad starts loadClients clients per process; every process starts
// in phase 0. With a non-nil pick, each outcome records the target it
// picks for the request id. The load stops at halt or when the test ends.
func startLoad(t *testing.T, pick *split.Split, procs ...*proc) *load {
	t.Helper()
	l := &load{
		phase:    make([]atomic.Int32, len(procs)),
		progress: make(chan struct{}, 1),
		counts:   map[outcome]int{},
	}
	stop := make(chan struct{})
	deadline := time.Now().Add(loadMaxTime)
	var wg sync.WaitGroup
	for via, p := range procs {
		for c := range loadClients {
			wg.Go(func() {
				for i := range loadMaxPerClient {
					select {
					case <-stop:
						return
					default:
					}
					if time.Now().After(deadline) {
						return
					}
					id := fmt.Sprintf("load-%d-%d-%d", via, c, i)
					o := outcome{via: via, phase: l.phase[via].Load()}
					if pick != nil {
						o.branch = pick.Pick(id)
					}
					var err error
					o.status, o.pool, o.endpoint, err = getID(p.Proxy, id)
					l.mu.Lock()
					l.counts[o]++
					if err != nil && len(l.errs) < 10 {
						l.errs = append(l.errs, err)
					}
					l.mu.Unlock()
					select {
					case l.progress <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	l.halt = sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(l.halt)
	return l
}

// setPhase sets the phase of every process.
func (l *load) setPhase(phase int32) {
	for i := range l.phase {
		l.phase[i].Store(phase)
	}
}

// count returns how many requests through process via ended as match says.
func (l *load) count(via int, match func(outcome) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for o, c := range l.counts {
		if o.via == via && match(o) {
			n += c
		}
	}
	return n
}

// outcomes returns a copy of the counts.
func (l *load) outcomes() map[outcome]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[outcome]int, len(l.counts))
	for o, c := range l.counts {
		m[o] = c
	}
	return m
}

// getID sends GET / with request id id through the proxy at addr and
// returns the answer's status (0 and the error when there was none), X-Pool
// and X-Endpoint. The body is read to its end.
func getID(addr, id string) (status int, pool, endpoint string, err error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("X-Request-Id", id)
	resp, err := httpc.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, "", "", fmt.Errorf("read the answer to %s: %w", id, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Pool"), resp.Header.Get("X-Endpoint"), nil
}

// waitUntil waits until cond holds, evaluating it at once and after each
// receive from any of signals, and fails the test when it does not hold
// within wait.
func waitUntil(t *testing.T, what string, cond func() bool, signals ...<-chan struct{}) {
	t.Helper()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(wait))}}
	for _, s := range signals {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s)})
	}
	for !cond() {
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("not within %v: %s", wait, what)
		}
	}
}

// reportSignal returns a channel that receives (collapsed) after every
// report a process records in gateway_instances (an apply or a heartbeat),
// so a test reads GET /api/v1/gateways after each one instead of polling
// on a timer.
func reportSignal(t *testing.T, url string) <-chan struct{} {
	t.Helper()
	dbtest.Exec(t, url, `
		CREATE FUNCTION test_report() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_notify('test_report', NEW.id);
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_report AFTER INSERT OR UPDATE ON gateway_instances FOR EACH ROW
			EXECUTE FUNCTION test_report()`)
	reports := dbtest.Watch(t, url, "test_report")
	sig := make(chan struct{}, 1)
	testrun.Background(t, func(ctx context.Context) error {
		for {
			select {
			case <-reports:
				select {
				case sig <- struct{}{}:
				default:
				}
			case <-ctx.Done():
				return nil
			}
		}
	})
	return sig
}

// shownUp reports whether GET /api/v1/gateways at admin shows, for every
// process of procs, generation gen (or newer) applied and endpoint of
// upstream with the given up state.
func shownUp(t *testing.T, admin string, procs []*proc, gen int64, upstream, endpoint string, up bool) bool {
	t.Helper()
	var page apiv1.GatewayList
	if resp := call(t, http.MethodGet, "http://"+admin+"/api/v1/gateways", nil, &page); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/gateways: status %d", resp.StatusCode)
	}
	shown := map[string]bool{}
	for _, gi := range page.Items {
		if gi.AppliedGeneration < gen {
			continue
		}
		for _, e := range gi.Endpoints {
			if e.Upstream == upstream && e.Endpoint == endpoint && e.Up == up {
				shown[gi.Listen] = true
			}
		}
	}
	for _, p := range procs {
		if !shown[p.Proxy] {
			return false
		}
	}
	return true
}

// TestKillOneOfTwoEndpointsUnderLoad kills one of an upstream's two
// endpoints (its listener and every connection) while 8 clients send GETs
// through serve's proxy and 8 through a replica's. It asserts that no GET
// fails on either process (the requests that meet the dead endpoint are
// retried on the other), that GET /api/v1/gateways shows the endpoint
// up:false for both processes while the load goes on, and that once the
// endpoint is started again on the same address both processes send it
// requests and the API shows it up:true. It asserts no latency; the time
// to each state is logged.
//
// With the passive checks at their defaults, the first three failures
// eject the endpoint, long before its active checks can mark it down, and
// it takes requests again when the ejection ends. So that the active
// checks are seen to mark it down and up, the second case also names the
// endpoint's address in an upstream of its own, which no service uses: the
// passive checks never eject an upstream's last endpoint, and the cap
// holds in every upstream naming the address, so only the active checks
// take it out of rotation, which the case asserts (no ejection counted).
func TestKillOneOfTwoEndpointsUnderLoad(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, tt := range []struct {
			name       string
			activeOnly bool
		}{
			{"passive and active", false},
			{"active only", true},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				killOneOfTwo(t, front, tt.activeOnly)
			})
		}
	})
}

// killOneOfTwo runs one case of TestKillOneOfTwoEndpointsUnderLoad.
func killOneOfTwo(t *testing.T, front string, activeOnly bool) {
	url := dbtest.New(t)
	reported := reportSignal(t, url)
	keep, err := demo.StartPool("keep", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(keep.Close)
	doomed, err := demo.StartPool("doomed", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(doomed.Close)
	addr := doomed.Addrs[0]

	// Heartbeats often, so the API shows the states soon; the test waits
	// for the reports, whenever they come.
	beat := Process{Heartbeat: 50 * time.Millisecond}
	srv := startServe(t, ServeConfig{Front: front, Process: beat, DatabaseURL: url})
	replica := startGateway(t, GatewayConfig{Front: front, Process: beat, DatabaseURL: url})
	procs := []*proc{srv, replica}
	spec := spectest.New().Upstream("web", keep.Addrs[0], addr).Route("web", "/", "web").
		Edit(func(s *config.Spec) { s.Upstreams[0].HealthCheck = fastCheck() })
	if activeOnly {
		spec.Upstream("pin", addr)
	}
	g := publish(t, srv.Admin, spec.JSON())
	for _, p := range procs {
		p.waitApplied(t, g.ID)
	}
	waitUntil(t, "both endpoints shown up:true for serve and the replica", func() bool {
		return shownUp(t, srv.Admin, procs, g.ID, "web", addr, true)
	}, reported)

	// Phase 0: both endpoints serve both processes' clients.
	l := startLoad(t, nil, procs...)
	servedBy := func(phase int32, endpoint string, n int) func() bool {
		return func() bool {
			for via := range procs {
				if l.count(via, func(o outcome) bool {
					return o.phase == phase && o.status == http.StatusOK && o.endpoint == endpoint
				}) < n {
					return false
				}
			}
			return true
		}
	}
	waitUntil(t, "50 requests of each process served by each endpoint", func() bool {
		return servedBy(0, keep.Addrs[0], 50)() && servedBy(0, addr, 50)()
	}, l.progress)

	// Phase 1: the endpoint dies under load, until it is shown down.
	l.setPhase(1)
	killed := time.Now()
	doomed.Close()
	waitUntil(t, "the killed endpoint shown up:false for serve and the replica", func() bool {
		return shownUp(t, srv.Admin, procs, g.ID, "web", addr, false)
	}, reported)
	downAfter := time.Since(killed)
	// Phase 2: the load goes on with the endpoint shown down.
	l.setPhase(2)
	waitUntil(t, "100 requests of each process sent after the endpoint was shown down", func() bool {
		for via := range procs {
			if l.count(via, func(o outcome) bool { return o.phase == 2 }) < 100 {
				return false
			}
		}
		return true
	}, l.progress)

	// Phase 3: started again on the same address, it serves again.
	back, err := demo.StartPoolOn("doomed", addr)
	if err != nil {
		t.Fatalf("start the endpoint again on %s: %v", addr, err)
	}
	t.Cleanup(back.Close)
	restarted := time.Now()
	l.setPhase(3)
	waitUntil(t, "the restarted endpoint serving requests of serve and of the replica", servedBy(3, addr, 1), l.progress)
	servesAfter := time.Since(restarted)
	waitUntil(t, "the restarted endpoint shown up:true for serve and the replica", func() bool {
		return shownUp(t, srv.Admin, procs, g.ID, "web", addr, true)
	}, reported)
	upAfter := time.Since(restarted)
	l.halt()

	names := []string{"serve", "replica"}
	var failed, total int
	for o, n := range l.outcomes() {
		total += n
		if o.status != http.StatusOK {
			failed += n
			t.Errorf("%d GETs through %s in phase %d: status %d", n, names[o.via], o.phase, o.status)
		}
	}
	for _, err := range l.errs {
		t.Errorf("GET failed: %v", err)
	}
	if failed > 0 {
		t.Fatalf("%d of %d GETs failed, want 0", failed, total)
	}
	if back.Hits(0) == 0 {
		t.Errorf("the restarted endpoint served no request")
	}
	for via, name := range names {
		t.Logf("%s: %d GETs before the kill (%d by the doomed endpoint), %d from the kill to the restart, %d after it (%d by the restarted endpoint)",
			name,
			l.count(via, func(o outcome) bool { return o.phase == 0 }),
			l.count(via, func(o outcome) bool { return o.phase == 0 && o.endpoint == addr }),
			l.count(via, func(o outcome) bool { return o.phase == 1 || o.phase == 2 }),
			l.count(via, func(o outcome) bool { return o.phase == 3 }),
			l.count(via, func(o outcome) bool { return o.phase == 3 && o.endpoint == addr }))
	}
	for via, p := range procs {
		ejections := scrape(t, metricsAddr(p), "dwara_upstream_ejections_total")
		t.Logf("%s: %v retries, %v passive ejections", names[via],
			scrape(t, metricsAddr(p), "dwara_upstream_retries_total")["upstream=web"], ejections["upstream=web"])
		if activeOnly && (ejections["upstream=web"] != 0 || ejections["upstream=pin"] != 0) {
			t.Errorf("%s: passive ejections %v, want none: only the active checks may take the endpoint out", names[via], ejections)
		}
	}
	t.Logf("%d GETs, 0 failed; shown down %v after the kill; served again %v and shown up %v after the restart",
		total, downAfter.Round(time.Millisecond), servesAfter.Round(time.Millisecond), upAfter.Round(time.Millisecond))
}

// switchable is a loopback endpoint of the canary: it answers every
// request, GET /healthz included, with 200 and X-Pool: canary, or with 500
// while broken. Each health check it receives signals probed.
type switchable struct {
	addr   string
	broken atomic.Bool
}

func startSwitchable(t *testing.T, probed chan<- struct{}) *switchable {
	t.Helper()
	e := &switchable{}
	srv := httptest.NewUnstartedServer(nil)
	e.addr = srv.Listener.Addr().String()
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Pool", "canary")
		w.Header().Set("X-Endpoint", e.addr)
		if e.broken.Load() {
			http.Error(w, "canary broken", http.StatusInternalServerError)
		} else {
			fmt.Fprintln(w, "canary")
		}
		if r.URL.Path == "/healthz" {
			select {
			case probed <- struct{}{}:
			default:
			}
		}
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return e
}

// metricsAddr returns the address of the /metrics of p: the admin listener
// of serve, the metrics listener of a gateway.
func metricsAddr(p *proc) string {
	if p.Metrics != "" {
		return p.Metrics
	}
	return p.Admin
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape returns every series of metric name at the /metrics of addr, as
// their labels and value.
func scrape(t *testing.T, addr, name string) map[string]float64 {
	t.Helper()
	resp, err := httpc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, %v", resp.StatusCode, err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		series, value, ok := cutLast(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		n, labels, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		var ls []string
		for _, m := range labelRE.FindAllStringSubmatch(labels, -1) {
			ls = append(ls, m[1]+"="+m[2])
		}
		out[strings.Join(ls, ",")] = v
	}
	return out
}

func cutLast(s, sep string) (before, after string, ok bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}

// canaryUp returns how many of the canary's endpoints p reports up in
// dwara_upstream_endpoint_up, or -1 when a series is missing.
func canaryUp(t *testing.T, p *proc, canary []*switchable) int {
	t.Helper()
	series := scrape(t, metricsAddr(p), "dwara_upstream_endpoint_up")
	up := 0
	for _, e := range canary {
		v, ok := series["endpoint="+e.addr+",upstream=canary"]
		if !ok {
			return -1
		}
		if v == 1 {
			up++
		}
	}
	return up
}

// failovers returns dwara_split_failovers_total{service="web",
// upstream="canary"} of p (0 before its first failover).
func failovers(t *testing.T, p *proc) float64 {
	t.Helper()
	return scrape(t, metricsAddr(p), "dwara_split_failovers_total")["service=web,upstream=canary"]
}

// TestCanaryTargetDownFailsOverAndRecovers splits 90/10 between a stable
// pool (two demo endpoints, no health_check) and a canary of two endpoints
// with active health checks, through serve's proxy and a replica's. It
// breaks the whole canary (every answer 500, health checks included) while
// 8 clients per process send GETs, and asserts:
//
//   - before a process is seen to have marked the canary down (its
//     dwara_upstream_endpoint_up of both canary endpoints 0), each answer
//     is 200 from stable, or the canary's own 500 to a request whose id
//     picks the canary: the picked canary was still up, and a 500 is an
//     answer, passed on and never retried;
//   - every request sent after that is answered 200 by stable: zero 5xx;
//   - dwara_split_failovers_total{upstream=canary} of each process rises by
//     exactly the number of its requests whose id picks the canary and that
//     stable answered, and by more than 0.
//
// Then it repairs the canary, waits until both processes report it up, and
// sends 2,000 requests with random ids (fixed seeds) through each: every
// one is answered 200 by the target its id picks, no failover is counted,
// and the split passes a chi-square test against 90/10 at p = 0.001.
func TestCanaryTargetDownFailsOverAndRecovers(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		stable, err := demo.StartPool("stable", 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stable.Close)
		probed := make(chan struct{}, 1)
		canary := []*switchable{startSwitchable(t, probed), startSwitchable(t, probed)}
		srv := startServe(t, ServeConfig{Front: front, DatabaseURL: url})
		replica := startGateway(t, GatewayConfig{Front: front, DatabaseURL: url})
		procs := []*proc{srv, replica}
		names := []string{"serve", "replica"}
		weights := []int{90, 10}
		pools := []string{"stable", "canary"}
		pick, err := split.New(weights)
		if err != nil {
			t.Fatal(err)
		}
		spec := spectest.New().
			Upstream("stable", stable.Addrs...).
			Upstream("canary", canary[0].addr, canary[1].addr).
			Split("web", "/", spectest.T("stable", weights[0]), spectest.T("canary", weights[1])).
			Edit(func(s *config.Spec) { s.Upstreams[1].HealthCheck = fastCheck() }).JSON()
		g := publish(t, srv.Admin, spec)
		for _, p := range procs {
			p.waitApplied(t, g.ID)
		}

		// Both targets serve, each request by the target its id picks.
		before := startLoad(t, pick, procs...)
		waitUntil(t, "each process's requests served by both targets", func() bool {
			for via := range procs {
				for branch := range pools {
					if before.count(via, func(o outcome) bool { return o.branch == branch }) < 10 {
						return false
					}
				}
			}
			return true
		}, before.progress)
		before.halt()
		for o, n := range before.outcomes() {
			if o.status != http.StatusOK || o.pool != pools[o.branch] {
				t.Errorf("canary up: %d requests through %s picking %s answered %d by %q", n, names[o.via], pools[o.branch], o.status, o.pool)
			}
		}

		// The whole canary breaks under load. Phase 0: broken, not yet seen
		// down; phase 1: sent after the process reported it down.
		fo0 := make([]float64, len(procs))
		for via, p := range procs {
			fo0[via] = failovers(t, p)
		}
		for _, e := range canary {
			e.broken.Store(true)
		}
		l := startLoad(t, pick, procs...)
		for via, p := range procs {
			waitUntil(t, "both canary endpoints reported down by "+names[via], func() bool { return canaryUp(t, p, canary) == 0 }, probed)
			l.phase[via].Store(1)
		}
		waitUntil(t, "400 requests of each process sent after it reported the canary down", func() bool {
			for via := range procs {
				if l.count(via, func(o outcome) bool { return o.phase == 1 }) < 400 {
					return false
				}
			}
			return true
		}, l.progress)
		l.halt()
		for _, err := range l.errs {
			t.Errorf("GET failed: %v", err)
		}
		raced := make([]int, len(procs))
		for o, n := range l.outcomes() {
			stableOK := o.status == http.StatusOK && o.pool == "stable"
			canary500 := o.status == http.StatusInternalServerError && o.pool == "canary" && o.branch == 1
			switch {
			case o.phase == 1 && !stableOK:
				t.Errorf("canary down: %d requests through %s picking %s answered %d by %q, want 200 by stable",
					n, names[o.via], pools[o.branch], o.status, o.pool)
			case o.phase == 0 && !stableOK && !canary500:
				t.Errorf("canary breaking: %d requests through %s picking %s answered %d by %q, want 200 by stable or the canary's 500",
					n, names[o.via], pools[o.branch], o.status, o.pool)
			case canary500:
				raced[o.via] += n
			}
		}
		for via, p := range procs {
			want := l.count(via, func(o outcome) bool { return o.branch == 1 && o.status == http.StatusOK && o.pool == "stable" })
			afterDown := l.count(via, func(o outcome) bool { return o.branch == 1 && o.phase == 1 })
			got := failovers(t, p) - fo0[via]
			if got != float64(want) || afterDown == 0 {
				t.Errorf("%s: dwara_split_failovers_total{upstream=canary} rose by %v, want %d (the requests picking the canary that stable answered; %d of them sent after it was reported down, want > 0)",
					names[via], got, want, afterDown)
			}
			t.Logf("%s, canary down: %d requests (%d sent after it was reported down), %d failed over to stable, %d answered 500 by the canary before it was marked down",
				names[via], l.count(via, func(outcome) bool { return true }), l.count(via, func(o outcome) bool { return o.phase == 1 }), want, raced[via])
		}

		// The canary recovers: once each process reports it up, the split is
		// 90/10 again.
		for _, e := range canary {
			e.broken.Store(false)
		}
		for via, p := range procs {
			waitUntil(t, "both canary endpoints reported up by "+names[via], func() bool { return canaryUp(t, p, canary) == len(canary) }, probed)
		}
		const n = 2000
		for via, p := range procs {
			fo := failovers(t, p)
			rng := rand.New(rand.NewPCG(20240801, uint64(via)))
			ids := make([]string, n)
			for i := range ids {
				ids[i] = fmt.Sprintf("%016x", rng.Uint64())
			}
			counts := make([]int, len(pools))
			var (
				mu    sync.Mutex
				wrong []string
				wg    sync.WaitGroup
			)
			for c := range loadClients {
				wg.Go(func() {
					for i := c; i < n; i += loadClients {
						status, pool, _, err := getID(p.Proxy, ids[i])
						branch := pick.Pick(ids[i])
						mu.Lock()
						if err != nil || status != http.StatusOK || pool != pools[branch] {
							wrong = append(wrong, fmt.Sprintf("%s picking %s: %d from %q, %v", ids[i], pools[branch], status, pool, err))
						} else {
							counts[branch]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if len(wrong) > 0 {
				t.Errorf("%s, canary back: %d of %d requests not answered 200 by the target their id picks; first: %s", names[via], len(wrong), n, wrong[0])
			}
			if got := failovers(t, p) - fo; got != 0 {
				t.Errorf("%s, canary back: %v failovers, want 0", names[via], got)
			}
			chi := teststat.ChiSquare(counts, weights)
			if chi > teststat.Critical001[1] {
				t.Errorf("%s, canary back: counts %v for weights %v: chi-square %.2f > %.3f (p = 0.001)", names[via], counts, weights, chi, teststat.Critical001[1])
			}
			t.Logf("%s, canary back: %d requests split %v (chi-square %.2f against 90/10)", names[via], n, counts, chi)
		}
	})
}
