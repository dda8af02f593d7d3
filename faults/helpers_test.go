package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
	"github.com/dwara/dwara/node"
)

// wait bounds every wait for a signal; a passing test never waits this
// long.
const wait = testrun.Timeout

// loadClient sends the proxied traffic of the tests: a request that gets
// no answer within 30 s is a failure.
var loadClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	Timeout:   30 * time.Second,
}

// apiClient calls the API. Its timeout is well above the 5 s within which
// the API should answer when the database does not, so a call that hangs
// shows as a client timeout, not as an answer.
var apiClient = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 8},
	Timeout:   20 * time.Second,
}

// proc is an in-process `dwara serve` or `dwara gateway --database-url`
// with its bound addresses and the generations its proxy applied.
type proc struct {
	node.Addrs
	name    string
	applied chan struct{} // receives (collapsed) after each Applied call
	latest  atomic.Int64  // the newest generation applied

	mu        sync.Mutex
	appliedAt map[int64]time.Time // when each generation was applied
	order     []int64             // the generations applied, in order

	logs *testlog.Buffer
	stop func() // cancels the process and waits for it to return nil
}

// hooks sets the process hooks of c to report to p.
func (p *proc) hooks(t testing.TB, c *node.Process, started chan<- node.Addrs) {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	p.logs = &testlog.Buffer{}
	c.Logger = slog.New(slog.NewTextHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c.Started = func(a node.Addrs) { started <- a }
	c.Applied = func(g int64) {
		now := time.Now()
		p.mu.Lock()
		if _, ok := p.appliedAt[g]; !ok {
			p.appliedAt[g] = now
			p.order = append(p.order, g)
		}
		p.mu.Unlock()
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
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log (last 6 KiB):\n%s", p.name, tail([]byte(p.logs.String()), 6<<10))
		}
	})
}

// waitApplied waits until the proxy applied generation gen (or a newer
// one) and returns when it was applied.
func (p *proc) waitApplied(t testing.TB, gen int64, within time.Duration) time.Time {
	t.Helper()
	timeout := time.After(within)
	for p.latest.Load() < gen {
		select {
		case <-p.applied:
		case <-timeout:
			t.Fatalf("%s: generation %d not applied within %v (latest %d)", p.name, gen, within, p.latest.Load())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The first generation at or after gen that was applied.
	for _, g := range p.order {
		if g >= gen {
			return p.appliedAt[g]
		}
	}
	return time.Now()
}

// appliedOrder returns the generations the proxy applied, in order.
func (p *proc) appliedOrder() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]int64(nil), p.order...)
}

func startServe(t testing.TB, name string, c node.ServeConfig) *proc {
	t.Helper()
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:0"
	}
	return start(t, name, &c.Process, func(ctx context.Context) error { return node.Serve(ctx, c) })
}

func startGateway(t testing.TB, name string, c node.GatewayConfig) *proc {
	t.Helper()
	if c.MetricsListen == "" {
		c.MetricsListen = "127.0.0.1:0"
	}
	return start(t, name, &c.Process, func(ctx context.Context) error { return node.Gateway(ctx, c) })
}

// start runs a process until stop is called or the test ends, then
// cancels it and checks that it returned nil. It returns once the process
// started (every listener bound).
func start(t testing.TB, name string, c *node.Process, run func(context.Context) error) *proc {
	t.Helper()
	p := &proc{name: name, applied: make(chan struct{}, 1), appliedAt: map[int64]time.Time{}}
	started := make(chan node.Addrs, 1)
	p.hooks(t, c, started)
	stopped := make(chan error, 1)
	p.stop = testrun.Background(t, func(ctx context.Context) error {
		err := run(ctx)
		stopped <- err
		return err
	})
	select {
	case p.Addrs = <-started:
	case err := <-stopped:
		t.Fatalf("%s failed to start: %v", name, err)
	case <-time.After(wait):
		t.Fatalf("%s did not start within %v", name, wait)
	}
	return p
}

// pools starts two demo pools of two endpoints each, closed when the test
// ends.
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

// specJSON splits "/" (service web) between pools a and b by the weights.
func specJSON(a, b *demo.Pool, wa, wb int) json.RawMessage {
	return spectest.SplitOver([]*demo.Pool{a, b}, wa, wb).JSON()
}

// apiAnswer is one API call's outcome: err is set when no answer came.
type apiAnswer struct {
	status int
	header http.Header
	body   []byte
	took   time.Duration
	err    error
}

func (a apiAnswer) String() string {
	if a.err != nil {
		return fmt.Sprintf("no answer after %v: %v", a.took.Round(time.Millisecond), a.err)
	}
	return fmt.Sprintf("%d after %v (Content-Type %q, Retry-After %q): %s", a.status, a.took.Round(time.Millisecond),
		a.header.Get("Content-Type"), a.header.Get("Retry-After"), bytes.TrimSpace(a.body))
}

// callAPI sends one API request with a JSON body (when non-nil).
func callAPI(method, url string, body any) apiAnswer {
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			return apiAnswer{err: err}
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return apiAnswer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Dwara-Actor", "faults")
	t0 := time.Now()
	resp, err := apiClient.Do(req)
	if err != nil {
		return apiAnswer{err: err, took: time.Since(t0)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return apiAnswer{status: resp.StatusCode, header: resp.Header, body: data, took: time.Since(t0), err: err}
}

// publish publishes spec through the API at admin and returns the new
// generation; anything but a 201 fails the test.
func publish(t testing.TB, admin string, spec json.RawMessage, message string) apiv1.Generation {
	t.Helper()
	a := callAPI(http.MethodPost, "http://"+admin+"/api/v1/generations", map[string]any{"message": message, "spec": spec})
	if a.err != nil || a.status != http.StatusCreated {
		t.Fatalf("publish: %s", a)
	}
	var g apiv1.Generation
	if err := json.Unmarshal(a.body, &g); err != nil {
		t.Fatalf("publish: decode %s: %v", a.body, err)
	}
	return g
}

// isUnavailable reports whether a is the answer the API owes a client
// while the database is away: 503 problem+json with Retry-After.
func isUnavailable(a apiAnswer) bool {
	return a.err == nil && a.status == http.StatusServiceUnavailable &&
		strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") &&
		a.header.Get("Retry-After") != ""
}

// served is what the upstream saw of one request through a proxy.
type served struct {
	pool       string
	generation int64 // X-Dwara-Generation as the upstream received it
}

// getVia sends one GET / through the proxy at addr and reads the demo
// pool's answer "pool=... endpoint=... generation=N path=...". Anything
// but a complete 200 is an error.
func getVia(addr string) (served, error) {
	resp, err := loadClient.Get("http://" + addr + "/")
	if err != nil {
		return served{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return served{}, fmt.Errorf("status %d, body cut: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return served{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return parseServed(resp.Header.Get("X-Pool"), body)
}

func parseServed(pool string, body []byte) (served, error) {
	s := served{pool: pool}
	for f := range strings.FieldsSeq(string(body)) {
		if v, ok := strings.CutPrefix(f, "generation="); ok {
			var err error
			if s.generation, err = strconv.ParseInt(v, 10, 64); err != nil {
				return served{}, fmt.Errorf("generation in %q: %w", body, err)
			}
		}
	}
	return s, nil
}

// load is traffic from a fixed number of clients, each sending one request
// after the other until stopped or until its time bound.
type load struct {
	mu       sync.Mutex
	ok       int
	failed   int
	failures []string       // the first few
	counts   map[string]int // by the label each request returns
	progress chan struct{}
	stopCh   chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once
	started  time.Time
}

// startLoad runs clients goroutines calling do(client, i) until stop is
// called, the test ends or bound elapsed. do returns a label to count the
// request under (a proxy, a pool) or an error, a failed request.
func startLoad(t testing.TB, clients int, bound time.Duration, do func(client, i int) (string, error)) *load {
	l := &load{counts: map[string]int{}, progress: make(chan struct{}, 1), stopCh: make(chan struct{}), started: time.Now()}
	deadline := time.Now().Add(bound)
	for c := range clients {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stopCh:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				label, err := do(c, i)
				l.mu.Lock()
				if err != nil {
					l.failed++
					if len(l.failures) < 10 {
						l.failures = append(l.failures, fmt.Sprintf("client %d request %d at +%v: %v", c, i, time.Since(l.started).Round(time.Millisecond), err))
					}
				} else {
					l.ok++
					l.counts[label]++
				}
				l.mu.Unlock()
				select {
				case l.progress <- struct{}{}:
				default:
				}
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

// stop stops the clients and waits for them; later calls do nothing.
func (l *load) stop() {
	l.stopOnce.Do(func() {
		close(l.stopCh)
		l.wg.Wait()
	})
}

// snapshot returns the counts so far.
func (l *load) snapshot() (ok, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, l.failed
}

// waitMore waits until n more requests than now have succeeded, or a
// request failed (the failures are reported by the caller).
func (l *load) waitMore(t testing.TB, n int) {
	t.Helper()
	base, _ := l.snapshot()
	timeout := time.After(wait)
	for {
		ok, failed := l.snapshot()
		if ok >= base+n || failed > 0 {
			return
		}
		select {
		case <-l.progress:
		case <-timeout:
			t.Fatalf("the load did not reach %d more requests within %v (%d so far)", n, wait, ok-base)
		}
	}
}

// report stops the load, logs its figures and fails the test for every
// failed request.
func (l *load) report(t testing.TB, what string) {
	t.Helper()
	l.stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("%s: %d requests in %v, %d failed, by label %v", what, l.ok+l.failed, time.Since(l.started).Round(time.Millisecond), l.failed, l.counts)
	for _, f := range l.failures {
		t.Errorf("%s: failed request: %s", what, f)
	}
	if l.failed > 0 {
		t.Errorf("%s: %d of %d requests failed, want 0", what, l.failed, l.ok+l.failed)
	}
}

// isRefused reports whether err is a refused connection: the listener is
// gone, nothing was sent.
func isRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}

// until calls cond every interval until it holds or within has passed, and
// returns how long that took and whether it held.
func until(within, interval time.Duration, cond func() bool) (time.Duration, bool) {
	t0 := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if cond() {
			return time.Since(t0), true
		}
		if time.Since(t0) > within {
			return time.Since(t0), false
		}
		<-tick.C
	}
}

// memFigures are a process's memory and goroutines at one moment.
type memFigures struct {
	rss        int64 // VmRSS, bytes
	heap       uint64
	goroutines int
}

func (m memFigures) String() string {
	return fmt.Sprintf("RSS %.1f MiB, heap %.1f MiB, %d goroutines", float64(m.rss)/(1<<20), float64(m.heap)/(1<<20), m.goroutines)
}

// measure collects garbage, returns freed memory to the OS, then reads
// VmRSS from /proc/self/status and counts goroutines.
func measure(t testing.TB) memFigures {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memFigures{rss: vmRSS(t), heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
}

func vmRSS(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatalf("read /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// upstream is a pool of loopback endpoints for the tests that need more
// than the demo pools: each request's body is read whole and answered with
// its length and CRC-32, after delay, so a test can check a POST arrived
// whole and keep requests in flight. An endpoint can be killed (its
// listener and every connection closed at once, as when its process dies)
// and revived on the same address.
type upstream struct {
	name  string
	addrs []string
	delay time.Duration

	mu      sync.Mutex
	servers []*http.Server // nil while the endpoint is killed
}

func startUpstream(t testing.TB, name string, n int, delay time.Duration) *upstream {
	t.Helper()
	u := &upstream{name: name, delay: delay}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		u.addrs = append(u.addrs, ln.Addr().String())
		u.servers = append(u.servers, u.serve(ln))
	}
	t.Cleanup(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		for i, s := range u.servers {
			if s != nil {
				_ = s.Close()
				u.servers[i] = nil
			}
		}
	})
	return u
}

// serve serves the endpoint listening on ln.
func (u *upstream) serve(ln net.Listener) *http.Server {
	addr := ln.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = io.WriteString(w, "ok\n")
			return
		}
		h := crc32.NewIEEE()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if u.delay > 0 {
			time.Sleep(u.delay)
		}
		w.Header().Set("X-Pool", u.name)
		fmt.Fprintf(w, "pool=%s endpoint=%s generation=%s len=%d crc=%08x\n", u.name, addr, r.Header.Get("X-Dwara-Generation"), n, h.Sum32())
	})}
	go func() { _ = srv.Serve(ln) }()
	return srv
}

// kill closes endpoint i's listener and every connection to it; it
// reports whether the endpoint was alive.
func (u *upstream) kill(i int) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.servers[i] == nil {
		return false
	}
	_ = u.servers[i].Close()
	u.servers[i] = nil
	return true
}

// revive listens on endpoint i's address again (retrying for a while if
// the port is not free yet); it reports an error when it cannot.
func (u *upstream) revive(i int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.servers[i] != nil {
		return nil
	}
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", u.addrs[i]); err == nil {
			u.servers[i] = u.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("revive endpoint %s of %s: %w", u.addrs[i], u.name, err)
}

// alive returns how many endpoints of u are alive.
func (u *upstream) alive() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, s := range u.servers {
		if s != nil {
			n++
		}
	}
	return n
}

// splitUpstreams splits service web on "/" between upstreams a and b.
func splitUpstreams(a, b *upstream, wa, wb int) *spectest.Builder {
	return spectest.New().Upstream(a.name, a.addrs...).Upstream(b.name, b.addrs...).
		Split("web", "/", spectest.T(a.name, wa), spectest.T(b.name, wb))
}

// checkEcho checks an upstream answer against the body that was sent.
func checkEcho(body []byte, sent []byte) error {
	want := fmt.Sprintf("len=%d crc=%08x", len(sent), crc32.ChecksumIEEE(sent))
	if !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("the upstream saw another body: answer %q, want %q", bytes.TrimSpace(body), want)
	}
	return nil
}
