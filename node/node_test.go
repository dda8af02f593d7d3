package node

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// wait bounds every wait for a signal in these tests.
const wait = testrun.Timeout

var httpc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: wait}

// TestMain fails the package when Serve or Gateway leaves a goroutine behind
// after it returned.
func TestMain(m *testing.M) {
	testrun.Main(m, httpc.CloseIdleConnections)
}

var discard = slog.New(slog.DiscardHandler)

// proc is an in-process dwara serve or gateway with its bound addresses and
// the generations its proxy applied.
type proc struct {
	Addrs
	applied chan struct{} // receives (collapsed) after each Applied call
	latest  atomic.Int64  // the newest generation applied
	stop    func()        // stops the process and waits for it
	// cachesReset is closed at the first CachesReset call: the process's
	// feed of cache purges connected, and its first purge of every cache
	// is behind it.
	cachesReset chan struct{}
}

// hooks sets the process hooks of c to report to p.
func (p *proc) hooks(c *Process, started chan<- Addrs) {
	c.Listen = "127.0.0.1:0"
	if c.Logger == nil {
		c.Logger = discard
	}
	c.Started = func(a Addrs) { started <- a }
	c.CachesReset = sync.OnceFunc(func() { close(p.cachesReset) })
	c.Applied = func(g int64) {
		// Serve applies from two goroutines (the API's publish and the
		// database source): keep the newest.
		for {
			cur := p.latest.Load()
			if g <= cur || p.latest.CompareAndSwap(cur, g) {
				break
			}
		}
		select {
		case p.applied <- struct{}{}:
		default:
		}
	}
}

// waitApplied waits until the proxy applied generation gen (or a newer one).
func (p *proc) waitApplied(t testing.TB, gen int64) {
	t.Helper()
	if !p.appliedWithin(gen, wait) {
		t.Fatalf("generation %d not applied within %v (latest %d)", gen, wait, p.latest.Load())
	}
}

// waitCachesReset waits until p's feed of cache purges connected and
// emptied every cache, as it does at its first connect: a page cached
// after that stays cached until a purge.
func (p *proc) waitCachesReset(t testing.TB) {
	t.Helper()
	select {
	case <-p.cachesReset:
	case <-time.After(wait):
		t.Fatalf("the process's feed of cache purges did not connect within %v", wait)
	}
}

// appliedWithin waits at most d for p to apply generation gen or a newer
// one, and reports whether it did.
func (p *proc) appliedWithin(gen int64, d time.Duration) bool {
	timeout := time.After(d)
	for p.latest.Load() < gen {
		select {
		case <-p.applied:
		case <-timeout:
			return false
		}
	}
	return true
}

// allFronts are the fronts the tests that serve traffic run on, in one go
// test (eachFront): fasthttp and net/http.
var allFronts = []string{FrontFastHTTP, FrontNetHTTP}

// eachFront runs f as a subtest on each of allFronts, named after the
// front (fasthttp, nethttp: no slash, so -run can name each). The
// subtests run one after another unless f calls t.Parallel.
func eachFront(t *testing.T, f func(t *testing.T, front string)) {
	t.Helper()
	for _, front := range allFronts {
		t.Run(strings.ReplaceAll(front, "/", ""), func(t *testing.T) { f(t, front) })
	}
}

// startServe runs dwara serve with c (its proxy on c.Front, "" for
// DefaultFront) until the test ends.
func startServe(t testing.TB, c ServeConfig) *proc {
	t.Helper()
	c.AdminListen = "127.0.0.1:0"
	return start(t, &c.Process, func(ctx context.Context) error { return Serve(ctx, c) })
}

// startGateway runs dwara gateway with c (on c.Front, "" for
// DefaultFront) until the test ends.
func startGateway(t testing.TB, c GatewayConfig) *proc {
	t.Helper()
	c.MetricsListen = "127.0.0.1:0"
	return start(t, &c.Process, func(ctx context.Context) error { return Gateway(ctx, c) })
}

// start runs a process until the test ends, then cancels it and checks
// that it returned nil. c is the Process of the config that run starts; it
// gets hooks that report to the returned proc. start returns once the
// process started.
func start(t testing.TB, c *Process, run func(context.Context) error) *proc {
	t.Helper()
	p := &proc{applied: make(chan struct{}, 1), cachesReset: make(chan struct{})}
	started := make(chan Addrs, 1)
	p.hooks(c, started)
	stopped := make(chan error, 1)
	p.stop = testrun.Background(t, func(ctx context.Context) error {
		err := run(ctx)
		stopped <- err
		return err
	})
	select {
	case p.Addrs = <-started:
	case err := <-stopped:
		t.Fatalf("process failed to start: %v", err)
	case <-time.After(wait):
		t.Fatalf("process did not start within %v", wait)
	}
	return p
}

func pools(t testing.TB) (a, b *demo.Pool) {
	t.Helper()
	var err error
	if a, err = demo.StartPool("pool-a", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if b, err = demo.StartPool("pool-b", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return a, b
}

// specJSON splits "/" between pools a and b by the weights.
func specJSON(a, b *demo.Pool, wa, wb int) json.RawMessage {
	return spectest.SplitOver([]*demo.Pool{a, b}, wa, wb).JSON()
}

// call sends an API request and decodes a JSON answer into out (when non-nil).
func call(t testing.TB, method, url string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode request body: %v", err)
		}
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, data, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return resp
}

// publish publishes spec through the API at admin.
func publish(t testing.TB, admin string, spec json.RawMessage) apiv1.Generation {
	t.Helper()
	var g apiv1.Generation
	resp := call(t, http.MethodPost, "http://"+admin+"/api/v1/generations", map[string]any{"message": "test", "spec": spec}, &g)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: status %d", resp.StatusCode)
	}
	return g
}

func publishTo(t testing.TB, s *db.Store, spec json.RawMessage) apiv1.Generation {
	t.Helper()
	g, err := s.Publish(context.Background(), db.PublishParams{Spec: spec, Action: apiv1.ActionCreate, Author: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// served is what the upstream saw of one request through a proxy.
type served struct {
	pool       string // X-Pool of the answer
	generation int64  // X-Dwara-Generation as the upstream received it
}

// get sends one request through the proxy at addr. The demo upstream answers
// "pool=... endpoint=... generation=N path=...".
func get(ctx context.Context, addr string) (served, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return served{}, err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return served{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return served{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return served{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	s := served{pool: resp.Header.Get("X-Pool")}
	for f := range strings.FieldsSeq(string(body)) {
		if v, ok := strings.CutPrefix(f, "generation="); ok {
			if s.generation, err = strconv.ParseInt(v, 10, 64); err != nil {
				return served{}, fmt.Errorf("generation in %q: %w", body, err)
			}
		}
	}
	return s, nil
}

// pool returns the pool that served one request through the proxy at addr.
func pool(t testing.TB, addr string) string {
	t.Helper()
	s, err := get(context.Background(), addr)
	if err != nil {
		t.Fatalf("GET through %s: %v", addr, err)
	}
	return s.pool
}

func TestPublishReachesEveryProxy(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		a, b := pools(t)
		reports := dbtest.Watch(t, url, db.GatewayNotifyChannel)
		srv := startServe(t, ServeConfig{Front: front, DatabaseURL: url})
		replica := startGateway(t, GatewayConfig{Front: front, DatabaseURL: url})

		g1 := publish(t, srv.Admin, specJSON(a, b, 100, 0))
		srv.waitApplied(t, g1.ID)
		replica.waitApplied(t, g1.ID)
		for _, p := range []*proc{srv, replica} {
			if got := pool(t, p.Proxy); got != "pool-a" {
				t.Errorf("generation 1 through %s: served by %q", p.Proxy, got)
			}
		}

		g2 := publish(t, srv.Admin, specJSON(a, b, 0, 100))
		if g2.ID != g1.ID+1 {
			t.Fatalf("ids %d then %d", g1.ID, g2.ID)
		}
		for name, p := range map[string]*proc{"serve": srv, "replica": replica} {
			p.waitApplied(t, g2.ID)
			for i := range 20 {
				if got := pool(t, p.Proxy); got != "pool-b" {
					t.Fatalf("%s: request %d after applying generation 2 served by %q", name, i, got)
				}
			}
		}

		// Both data planes report the generation they applied: wait for the
		// reports, then read them back through the API.
		pending := map[string]bool{srv.Proxy: true, replica.Proxy: true}
		timeout := time.After(wait)
		for len(pending) > 0 {
			select {
			case payload := <-reports:
				var gi apiv1.GatewayInstance
				if err := json.Unmarshal([]byte(payload), &gi); err != nil {
					t.Errorf("gateway payload %q: %v", payload, err)
					continue
				}
				if gi.AppliedGeneration == g2.ID {
					delete(pending, gi.Listen)
				}
			case <-timeout:
				t.Fatalf("no report of generation %d within %v from %v", g2.ID, wait, pending)
			}
		}
		var page struct{ Items []apiv1.GatewayInstance }
		call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/gateways", nil, &page)
		at2 := map[string]bool{}
		for _, gi := range page.Items {
			if gi.AppliedGeneration == g2.ID {
				at2[gi.Listen] = true
			}
		}
		if len(page.Items) != 2 || !at2[srv.Proxy] || !at2[replica.Proxy] {
			t.Errorf("gateways = %+v, want serve's and the replica's proxy on generation %d", page.Items, g2.ID)
		}
	})
}

// sample is one request of the load in TestFlipUnderLoad.
type sample struct {
	via    int   // index of the process the request went through
	before int64 // the generation that process had reported applied when the request was sent
	acked  int64 // the newest generation whose 201 had arrived when the request was sent
	served
}

// TestFlipUnderLoad sends traffic from 8 clients through the embedded proxy
// and a replica while the API flips the split twice. It asserts order, not
// latency: no request fails; a request sent after a process reported
// generation N applied is served by N or newer, as the upstream saw it in
// X-Dwara-Generation; through the embedded proxy, so is every request sent
// after N's 201; and each generation is served by its pool.
func TestFlipUnderLoad(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		a, b := pools(t)
		srv := startServe(t, ServeConfig{Front: front, DatabaseURL: url})
		replica := startGateway(t, GatewayConfig{Front: front, DatabaseURL: url})
		procs := []*proc{srv, replica}
		g1 := publish(t, srv.Admin, specJSON(a, b, 100, 0))
		for _, p := range procs {
			p.waitApplied(t, g1.ID)
		}

		var (
			acked    atomic.Int64 // newest generation whose 201 arrived
			mu       sync.Mutex
			samples  []sample
			counts   [2]map[int64]int // per process: requests by generation reported before sending
			failures []error
			progress = make(chan struct{}, 1)
			stop     = make(chan struct{})
			wg       sync.WaitGroup
		)
		acked.Store(g1.ID)
		counts[0], counts[1] = map[int64]int{}, map[int64]int{}
		for c := range 8 {
			via := c % 2
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					s := sample{via: via, before: procs[via].latest.Load(), acked: acked.Load()}
					var err error
					s.served, err = get(context.Background(), procs[via].Proxy)
					mu.Lock()
					if err != nil {
						failures = append(failures, err)
					} else {
						samples = append(samples, s)
						counts[via][s.before]++
					}
					mu.Unlock()
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			})
		}
		stopLoad := sync.OnceFunc(func() {
			close(stop)
			wg.Wait()
		})
		defer stopLoad() // also when the test fails half-way
		// awaitLoad waits until each process served n requests sent after it
		// reported generation gen applied, or until a request failed (the
		// failures are reported once the load stopped).
		awaitLoad := func(gen int64, n int) {
			t.Helper()
			timeout := time.After(wait)
			for {
				mu.Lock()
				reached, failed := true, len(failures) > 0
				for via := range procs {
					sent := 0
					for g, c := range counts[via] {
						if g >= gen {
							sent += c
						}
					}
					reached = reached && sent >= n
				}
				mu.Unlock()
				if reached || failed {
					return
				}
				select {
				case <-progress:
				case <-timeout:
					t.Fatalf("the load did not reach %d requests per process at generation %d within %v", n, gen, wait)
				}
			}
		}
		flip := func() int64 {
			t.Helper()
			var g apiv1.Generation
			resp := call(t, http.MethodPost, "http://"+srv.Admin+"/api/v1/services/web/flip", map[string]any{"message": "flip"}, &g)
			if resp.StatusCode != http.StatusCreated || g.Action != apiv1.ActionFlip {
				t.Fatalf("flip: %d %+v", resp.StatusCode, g)
			}
			acked.Store(g.ID)
			for _, p := range procs {
				p.waitApplied(t, g.ID)
			}
			return g.ID
		}
		awaitLoad(g1.ID, 150)
		g2 := flip()
		awaitLoad(g2, 150)
		g3 := flip()
		awaitLoad(g3, 150)
		stopLoad()

		for i, err := range failures {
			if i < 5 {
				t.Errorf("request failed during the flips: %v", err)
			}
		}
		if len(failures) > 0 {
			t.Fatalf("%d requests failed during the flips", len(failures))
		}
		wantPool := map[int64]string{g1.ID: "pool-a", g2: "pool-b", g3: "pool-a"}
		names := []string{"embedded proxy", "replica"}
		var wrong int
		for _, s := range samples {
			floor := s.before
			if s.via == 0 {
				floor = max(floor, s.acked) // applied before the 201
			}
			if s.generation < floor || s.pool != wantPool[s.generation] {
				wrong++
				if wrong <= 5 {
					t.Errorf("via the %s: sent after generation %d (201 of %d), served by generation %d from %q",
						names[s.via], s.before, s.acked, s.generation, s.pool)
				}
			}
		}
		if wrong > 0 {
			t.Errorf("%d of %d requests were served out of order", wrong, len(samples))
		}
		t.Logf("%d requests, 2 flips, 0 failures", len(samples))
	})
}

// BenchmarkPublishToApplied publishes through the API and measures until the
// replica (a gateway following the database) applied the generation: from
// sending the POST (publish-*) and from the 201 (commit-*). It breaks the
// path down with the replica's Process.Trace: POST sent to the
// notification delivered (post-notify: the API's decode, validation and
// transaction, the commit and the NOTIFY), then the replica's newest-id
// query (id), its load of the generation (load), the spec's decode
// (decode), the read of the canary weights in force (overlay), and the
// compile and swap (apply); and, measured apart on the same database, a
// Store.Publish (store-publish: the transaction with its audit row and
// NOTIFY, and the commit) and a config.Parse of the spec (parse).
func BenchmarkPublishToApplied(b *testing.B) {
	url := dbtest.New(b)
	pa, pb := pools(b)
	srv := startServe(b, ServeConfig{DatabaseURL: url})
	var mu sync.Mutex
	stamps := map[string]time.Time{}
	gc := GatewayConfig{DatabaseURL: url}
	gc.Trace = func(stage string) {
		mu.Lock()
		stamps[stage] = time.Now()
		mu.Unlock()
	}
	replica := startGateway(b, gc)
	parts := []string{"post-notify", "id", "load", "decode", "overlay", "apply"}
	stages := []string{"notified", "newest-id", "loaded", "decoded", "overlaid"}
	lat := map[string][]time.Duration{}
	i := 0
	for b.Loop() {
		i++
		mu.Lock()
		clear(stamps)
		mu.Unlock()
		t0 := time.Now()
		g := publish(b, srv.Admin, specJSON(pa, pb, 100-i%100, i%100))
		t1 := time.Now()
		replica.waitApplied(b, g.ID)
		t2 := time.Now()
		lat["publish"] = append(lat["publish"], t2.Sub(t0))
		lat["commit"] = append(lat["commit"], t2.Sub(t1))
		mu.Lock()
		prev, complete := t0, true
		for j, st := range stages {
			at, ok := stamps[st]
			if !ok || at.Before(prev) {
				complete = false
				break
			}
			lat[parts[j]] = append(lat[parts[j]], at.Sub(prev))
			prev = at
		}
		if complete {
			lat["apply"] = append(lat["apply"], t2.Sub(prev))
		}
		mu.Unlock()
	}
	b.StopTimer()
	store, err := db.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	for j := range 200 {
		body := specJSON(pa, pb, 100-j%100, j%100)
		t0 := time.Now()
		if _, err := config.Parse(body); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		publishTo(b, store, body)
		lat["parse"] = append(lat["parse"], t1.Sub(t0))
		lat["store-publish"] = append(lat["store-publish"], time.Since(t1))
	}
	q := func(lat []time.Duration, p float64) float64 {
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	for _, name := range append([]string{"publish", "commit", "store-publish", "parse"}, parts...) {
		if len(lat[name]) == 0 {
			b.Fatalf("no %s measured", name)
		}
		b.ReportMetric(q(lat[name], 0.50), name+"-p50-ms")
		b.ReportMetric(q(lat[name], 0.99), name+"-p99-ms")
	}
	b.ReportMetric(float64(len(lat["apply"])), "traced")
	b.ReportMetric(0, "ns/op")
}

// sseStream reads server-sent events.
type sseStream struct{ r *bufio.Reader }

// subscribe subscribes to GET /api/v1/events at admin until the test ends,
// and returns once the server says the stream is subscribed.
func subscribe(t testing.TB, admin string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/api/v1/events", nil)
	// Not httpc: its Timeout would end the stream.
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("GET /api/v1/events: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := &sseStream{r: bufio.NewReader(resp.Body)}
	if line, err := s.r.ReadString('\n'); err != nil || line != ": connected\n" {
		t.Fatalf("first line of the event stream %q, %v", line, err)
	}
	return s
}

// next returns the next event, skipping comments.
func (s *sseStream) next(t testing.TB) (name, data string) {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// TestOneListenConnectionPerProcess proves that the database source and the
// API's event stream of a serve process share one LISTEN connection, and
// that a replica adds exactly one more.
func TestOneListenConnectionPerProcess(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		store, url := dbtest.NewStore(t)
		a, b := pools(t)
		// Without a resync, and with generations published behind the API's
		// back, a process applies a generation only when its listener connects
		// or notifies.
		srv := startServe(t, ServeConfig{Front: front, DatabaseURL: url, Process: Process{Resync: time.Hour}})
		g1 := publishTo(t, store, specJSON(a, b, 100, 0))
		srv.waitApplied(t, g1.ID)
		if resp := call(t, http.MethodGet, "http://"+srv.Admin+"/readyz", nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("/readyz: status %d", resp.StatusCode)
		}

		// The same connection feeds the event stream and the proxy.
		stream := subscribe(t, srv.Admin)
		g2 := publishTo(t, store, specJSON(a, b, 0, 100))
		for {
			// The events of generation 1 may still be on their way.
			name, data := stream.next(t)
			if name != apiv1.EventGenerationPublished {
				continue
			}
			var got apiv1.Generation
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatalf("event %s %s: %v", name, data, err)
			}
			if got.ID == g2.ID {
				break
			}
		}
		srv.waitApplied(t, g2.ID)
		if n := dbtest.ListenerCount(t, url); n != 1 {
			t.Errorf("serve holds %d LISTEN connections, want 1", n)
		}

		replica := startGateway(t, GatewayConfig{Front: front, DatabaseURL: url, Process: Process{Resync: time.Hour}})
		replica.waitApplied(t, g2.ID)
		if n := dbtest.ListenerCount(t, url); n != 2 {
			t.Errorf("serve and a replica hold %d LISTEN connections, want 2", n)
		}
	})
}

// TestReplicaSurvivesListenerKill terminates every listener backend of the
// database, then publishes a generation: serve and the replica reconnect
// and apply it without a restart.
func TestReplicaSurvivesListenerKill(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		store, url := dbtest.NewStore(t)
		a, b := pools(t)
		// Without a resync, applying a generation published behind the API's
		// back proves a process's listener connected.
		srv := startServe(t, ServeConfig{Front: front, DatabaseURL: url, Process: Process{Resync: time.Hour}})
		replica := startGateway(t, GatewayConfig{Front: front, DatabaseURL: url, Process: Process{Resync: time.Hour}})
		g1 := publishTo(t, store, specJSON(a, b, 100, 0))
		srv.waitApplied(t, g1.ID)
		replica.waitApplied(t, g1.ID)

		if killed := dbtest.KillListeners(t, url); killed != 2 {
			t.Fatalf("terminated %d listener backends, want serve's and the replica's", killed)
		}
		// Published while the listeners are down or reconnecting: the reconnect
		// loads the newest generation, so it is not missed.
		g2 := publishTo(t, store, specJSON(a, b, 0, 100))
		replica.waitApplied(t, g2.ID)
		srv.waitApplied(t, g2.ID)
		for _, p := range []*proc{srv, replica} {
			if got := pool(t, p.Proxy); got != "pool-b" {
				t.Errorf("after the reconnect %s serves %q, want pool-b", p.Proxy, got)
			}
		}
	})
}

// splitFile is a spec file splitting "/" between pools a and b.
func splitFile(a, b *demo.Pool, wa, wb int) string {
	return fmt.Sprintf(`upstreams:
  - {name: pool-a, endpoints: [%q]}
  - {name: pool-b, endpoints: [%q]}
services:
  - name: web
    split:
      targets:
        - {upstream: pool-a, weight: %d}
        - {upstream: pool-b, weight: %d}
`, a.Addrs[0], b.Addrs[0], wa, wb)
}

func TestGatewayFromFileReloads(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a, b := pools(t)
		file := filepath.Join(t.TempDir(), "dwara.yaml")
		if err := os.WriteFile(file, []byte(splitFile(a, b, 100, 0)), 0o644); err != nil {
			t.Fatal(err)
		}
		reload := make(chan struct{}, 1)
		gw := startGateway(t, GatewayConfig{Front: front, ConfigFile: file, Reload: reload})
		gw.waitApplied(t, 1)
		if got := pool(t, gw.Proxy); got != "pool-a" {
			t.Errorf("generation 1 served by %q, want pool-a", got)
		}
		// The Reload channel forces a reload of unchanged content.
		reload <- struct{}{}
		gw.waitApplied(t, 2)
		if s, err := get(context.Background(), gw.Proxy); err != nil || s.generation != 2 {
			t.Errorf("after the reload: %+v, %v; want generation 2", s, err)
		}
	})
}

// TestGatewayStopsWhenAPartFails starts a gateway whose spec file is
// refused: the source's error stops the process, which returns it after
// releasing its listeners.
func TestGatewayStopsWhenAPartFails(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "dwara.yaml")
	if err := os.WriteFile(file, []byte("upstreams: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	started := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Gateway(context.Background(), GatewayConfig{
			Process: Process{
				Listen: "127.0.0.1:0", Logger: discard,
				Started: func(a Addrs) { started <- a },
			},
			MetricsListen: "127.0.0.1:0",
			ConfigFile:    file,
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(wait):
		t.Fatalf("Gateway did not return within %v of a refused first file", wait)
	}
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("Gateway = %v, want the refusal of %s", err, file)
	}
	a := <-started
	for _, addr := range []string{a.Proxy, a.Metrics} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s still bound after Gateway returned: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

// TestListenerFansOut checks the one piece of code that fans the process's
// notifications out: every consumer is told of each (re)connect, and gets
// the notifications of its channels only.
func TestListenerFansOut(t *testing.T) {
	t.Parallel()
	var got []string
	record := func(who string) consumer {
		return consumer{
			channels:  map[string][]string{"gens": {db.NotifyChannel}, "events": {db.NotifyChannel, db.GatewayNotifyChannel}}[who],
			connected: func() { got = append(got, who+" connected") },
			notify:    func(ch, payload string) { got = append(got, who+" "+ch+" "+payload) },
		}
	}
	l := listener("postgres://unused", discard, record("gens"), record("events"))
	if want := []string{db.NotifyChannel, db.GatewayNotifyChannel}; !slices.Equal(l.Channels, want) {
		t.Errorf("channels %v, want %v", l.Channels, want)
	}
	if err := l.OnConnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.OnNotify(db.NotifyChannel, "7")
	l.OnNotify(db.GatewayNotifyChannel, "{}")
	want := []string{
		"gens connected", "events connected",
		"gens " + db.NotifyChannel + " 7", "events " + db.NotifyChannel + " 7",
		"events " + db.GatewayNotifyChannel + " {}",
	}
	if !slices.Equal(got, want) {
		t.Errorf("fan-out %q, want %q", got, want)
	}
}

func TestServeRefusesPublicAdminWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:9090"} {
		err := Serve(context.Background(), ServeConfig{AdminListen: addr, DatabaseURL: "postgres://unused", Process: Process{Logger: discard}})
		if err == nil || !strings.Contains(err.Error(), "DWARA_ADMIN_TOKEN") {
			t.Errorf("admin listen %s without a token: %v, want a refusal naming DWARA_ADMIN_TOKEN", addr, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "localhost:1": true, "[::1]:9090": true, "127.5.5.5:1": true, "0.0.0.0:1": false, "example.test:1": false, "garbage": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestGatewayProfiles: the runtime profiles are served on the metrics
// listener only when asked for.
func TestGatewayProfiles(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a, b := pools(t)
		file := filepath.Join(t.TempDir(), "dwara.yaml")
		if err := os.WriteFile(file, []byte(splitFile(a, b, 100, 0)), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, profile := range []bool{false, true} {
			gw := startGateway(t, GatewayConfig{Front: front, ConfigFile: file, Profile: profile})
			resp, err := httpc.Get("http://" + gw.Metrics + "/debug/pprof/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := http.StatusNotFound
			if profile {
				want = http.StatusOK
			}
			if resp.StatusCode != want {
				t.Errorf("Profile %t: /debug/pprof/ answered %d, want %d", profile, resp.StatusCode, want)
			}
		}
	})
}

func TestGatewaysShowEndpointStates(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		a, _ := pools(t)
		dead := testnet.ClosedAddr(t)
		// The test reads the API after each report an instance records.
		reports := reportSignal(t, url)
		// Beat often; the test waits for the reports, whenever they come.
		beat := Process{Heartbeat: 50 * time.Millisecond}
		srv := startServe(t, ServeConfig{Front: front, Process: beat, DatabaseURL: url})
		replica := startGateway(t, GatewayConfig{Front: front, Process: beat, DatabaseURL: url})

		// "dead" is checked every second and marked down by its first failed
		// check (connection refused); "live" declares no check and stays up.
		spec := json.RawMessage(`{
		"upstreams": [
			{"name": "live", "endpoints": ` + mustJSON(t, a.Addrs) + `},
			{"name": "dead", "endpoints": ["` + dead + `"],
			 "health_check": {"path": "/healthz", "interval_s": 1, "timeout_s": 1, "healthy_threshold": 1, "unhealthy_threshold": 1}}
		],
		"services": [
			{"name": "web", "base_path": "/", "upstream": "live"},
			{"name": "gone", "base_path": "/gone", "upstream": "dead"}
		]}`)
		g := publish(t, srv.Admin, spec)
		srv.waitApplied(t, g.ID)
		replica.waitApplied(t, g.ID)

		want := []apiv1.EndpointState{{Upstream: "dead", Endpoint: dead, Up: false}}
		for _, addr := range a.Addrs {
			want = append(want, apiv1.EndpointState{Upstream: "live", Endpoint: addr, Up: true})
		}
		timeout := time.After(wait)
		var page apiv1.GatewayList
		for {
			select {
			case <-reports:
			case <-timeout:
				t.Fatalf("GET /api/v1/gateways did not show %+v for serve and the replica within %v; last %+v", want, wait, page.Items)
			}
			page = apiv1.GatewayList{}
			call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/gateways", nil, &page)
			shown := map[string]bool{}
			for _, gi := range page.Items {
				// Nothing is in flight between requests: compare without it.
				got := slices.Clone(gi.Endpoints)
				for i := range got {
					got[i].InFlight = 0
				}
				if gi.AppliedGeneration == g.ID && slices.Equal(got, want) {
					shown[gi.Listen] = true
				}
			}
			if shown[srv.Proxy] && shown[replica.Proxy] {
				break
			}
		}

		// The JSON shape, as a client that does not use apiv1 sees it.
		var raw struct {
			Items []struct {
				Endpoints []map[string]any `json:"endpoints"`
			} `json:"items"`
		}
		call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/gateways", nil, &raw)
		for _, gi := range raw.Items {
			for _, e := range gi.Endpoints {
				keys := slices.Sorted(maps.Keys(e))
				if !slices.Equal(keys, []string{"endpoint", "in_flight", "up", "upstream"}) {
					t.Errorf("endpoint state %v: keys %v, want endpoint, in_flight, up, upstream", e, keys)
				}
			}
		}
	})
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// TestGatewayFronts serves the same spec with each front: both route to the
// pool, and the process stops cleanly (start checks that it returns nil);
// an unknown front is refused.
func TestGatewayFronts(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	file := filepath.Join(t.TempDir(), "dwara.yaml")
	if err := os.WriteFile(file, []byte(splitFile(a, b, 100, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, front := range []string{"", FrontNetHTTP, FrontFastHTTP} {
		gw := startGateway(t, GatewayConfig{ConfigFile: file, Front: front})
		gw.waitApplied(t, 1)
		if got := pool(t, gw.Proxy); got != "pool-a" {
			t.Errorf("front %q: served by %q, want pool-a", front, got)
		}
		// Every front checks request heads as the proxy does: obsolete
		// line folding, which net/http's parser alone would repair and
		// pass on, is refused.
		if answer := rawExchange(t, gw.Proxy, "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n"); !strings.HasPrefix(answer, "HTTP/1.1 400 ") ||
			!strings.Contains(answer, "application/problem+json") {
			t.Errorf("front %q: obsolete line folding answered %q; want 400 problem+json", front, answer)
		}
	}
	err := Gateway(context.Background(), GatewayConfig{
		Process:       Process{Listen: "127.0.0.1:0", Logger: discard},
		MetricsListen: "127.0.0.1:0", ConfigFile: file, Front: "h2o",
	})
	if err == nil || !strings.Contains(err.Error(), `unknown front "h2o"`) {
		t.Errorf("Front h2o: %v, want it refused", err)
	}
}

// rawExchange writes in on a new connection to addr and returns all that
// comes back until the connection closes.
func rawExchange(t *testing.T, addr, in string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(c)
	return string(out)
}
