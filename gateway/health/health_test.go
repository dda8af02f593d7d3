package health

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dwara/dwara/gateway/balance"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// TestMain fails the package when a checker, a probe or a test server
// leaves a goroutine behind.
func TestMain(m *testing.M) { testrun.Main(m) }

// transition is a logged transition, as the test reads it.
type transition struct {
	msg                string
	level              slog.Level
	upstream, endpoint string
	reason             string
}

// recorder is a slog.Handler that writes records to the test's output and
// hands each one to a channel without blocking.
type recorder struct {
	slog.Handler
	ch chan transition
}

func newLogger(t *testing.T) (*slog.Logger, <-chan transition) {
	ch := make(chan transition, 1024)
	h := slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(&recorder{Handler: h, ch: ch}), ch
}

func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	tr := transition{msg: rec.Message, level: rec.Level}
	rec.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "upstream":
			tr.upstream = a.Value.String()
		case "endpoint":
			tr.endpoint = a.Value.String()
		case "reason":
			tr.reason = a.Value.String()
		}
		return true
	})
	select {
	case r.ch <- tr:
	default:
	}
	return r.Handler.Handle(ctx, rec)
}

func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &recorder{Handler: r.Handler.WithAttrs(as), ch: r.ch}
}

func (r *recorder) WithGroup(name string) slog.Handler {
	return &recorder{Handler: r.Handler.WithGroup(name), ch: r.ch}
}

const (
	msgDown = "health check: endpoint down"
	msgUp   = "health check: endpoint up"
)

// waitLog reads logs until one with message msg arrives and returns it.
func waitLog(t *testing.T, logs <-chan transition, msg string) transition {
	t.Helper()
	deadline := time.After(testrun.Timeout)
	for {
		select {
		case tr := <-logs:
			if tr.msg == msg {
				return tr
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for log %q", testrun.Timeout, msg)
		}
	}
}

// probe is one check as a scripted endpoint received it; the test answers
// it with a status code on reply.
type probe struct {
	method, target, host, userAgent, connection string
	reply                                       chan<- int
}

// scripted is an endpoint whose every check waits for the test to pick
// the answer: the test reads probes and answers each, so it knows exactly
// how many checks were sent and what each was told.
type scripted struct {
	srv    *httptest.Server
	probes chan probe
	count  atomic.Int64
}

func startScripted(t *testing.T, tlsServer bool) *scripted {
	t.Helper()
	s := &scripted{probes: make(chan probe)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.count.Add(1)
		reply := make(chan int, 1)
		p := probe{r.Method, r.RequestURI, r.Host, r.UserAgent(), r.Header.Get("Connection"), reply}
		select {
		case s.probes <- p:
		case <-r.Context().Done():
			return
		case <-time.After(testrun.Timeout):
			return
		}
		select {
		case code := <-reply:
			w.WriteHeader(code)
		case <-r.Context().Done():
		case <-time.After(testrun.Timeout):
		}
	})
	s.srv = httptest.NewUnstartedServer(h)
	// Handshakes the untrusting client refuses are logged with the test.
	s.srv.Config.ErrorLog = log.New(t.Output(), "endpoint: ", 0)
	if tlsServer {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	t.Cleanup(s.srv.Close)
	return s
}

// addr is the endpoint as a spec writes it.
func (s *scripted) addr() string {
	if s.srv.TLS != nil {
		return s.srv.URL
	}
	return strings.TrimPrefix(s.srv.URL, "http://")
}

// answer waits for the next check and answers it with code.
func (s *scripted) answer(t *testing.T, code int) probe {
	t.Helper()
	p := testrun.Recv(t, s.probes, "a health check")
	p.reply <- code
	return p
}

// fast checks every millisecond; slow checks only once, at the start.
func fast(config.HealthCheck) time.Duration { return time.Millisecond }
func slow(config.HealthCheck) time.Duration { return time.Hour }

func newManager(t *testing.T, interval func(config.HealthCheck) time.Duration) (*Manager, <-chan transition) {
	t.Helper()
	log, logs := newLogger(t)
	m := NewManager(Options{Logger: log, Interval: interval})
	t.Cleanup(m.Close)
	return m, logs
}

func check(healthy, unhealthy int) config.HealthCheck {
	return config.HealthCheck{Path: "/healthz", IntervalS: 1, TimeoutS: 1, HealthyThreshold: healthy, UnhealthyThreshold: unhealthy}
}

// runners counts the goroutines of the process that run a checker.
func runners() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "gateway/health.(*checker).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitRunners waits until exactly want goroutines run a checker and fails
// the test when that does not happen within testrun.Timeout. A stopped
// checker has signalled its end when Close or Reconcile returns, but its
// goroutine may need a moment more to return.
func waitRunners(t *testing.T, want int) int {
	t.Helper()
	deadline := time.Now().Add(testrun.Timeout)
	for {
		n := runners()
		if n == want {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines run a checker, want %d", n, want)
		}
		runtime.Gosched()
	}
}

// TestThresholds drives one checker through failures and successes and
// checks each state it passes through: the endpoint starts up, goes down at
// exactly the unhealthy threshold and comes back at exactly the healthy
// threshold; a success resets the failures and a failure the successes.
func TestThresholds(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, fast)
	var st balance.State
	hc := check(2, 3)
	hc.Path = "/healthz?deep=1"
	host := s.addr()
	m.Reconcile([]Target{{Upstream: "api", Endpoint: host, State: &st, Check: hc}})

	// A check arrives only after the one before it was counted, so the
	// state seen when check i arrives is the state after answers 0..i-1.
	steps := []struct {
		upAtArrival bool
		answer      int
	}{
		{true, 500},  // 1 failure
		{true, 500},  // 2
		{true, 200},  // a success resets the failures
		{true, 500},  // 1
		{true, 500},  // 2
		{true, 418},  // 3: down
		{false, 200}, // 1 success
		{false, 503}, // a failure resets the successes
		{false, 204}, // 1
		{false, 302}, // 2: up
		{true, 500},  // 1 failure
		{true, 0},
	}
	for i, step := range steps {
		p := testrun.Recv(t, s.probes, fmt.Sprintf("check %d", i))
		if i == 0 && (p.method != "GET" || p.target != "/healthz?deep=1" || p.host != host || p.userAgent != "dwara-health" || p.connection != "close") {
			t.Errorf("check %+v, want GET /healthz?deep=1, Host %s, User-Agent dwara-health, Connection close", p, host)
		}
		if st.Up() != step.upAtArrival {
			t.Fatalf("at check %d: up %v, want %v", i, st.Up(), step.upAtArrival)
		}
		if step.answer == 0 {
			break
		}
		p.reply <- step.answer
		switch i {
		case 5:
			tr := waitLog(t, logs, msgDown)
			if tr.level != slog.LevelWarn || tr.upstream != "api" || tr.endpoint != host || tr.reason != "status 418" {
				t.Errorf("down log %+v, want Warn with upstream api, endpoint %s, reason status 418", tr, host)
			}
		case 9:
			tr := waitLog(t, logs, msgUp)
			if tr.level != slog.LevelInfo || tr.upstream != "api" || tr.endpoint != host || tr.reason != "status 302" {
				t.Errorf("up log %+v, want Info with upstream api, endpoint %s, reason status 302", tr, host)
			}
		}
	}
}

// TestStatusRange checks which answers count as a success: 2xx and 3xx.
func TestStatusRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     int
		ok       bool
		expected config.StatusRange // zero: the default 200..399
	}{
		{code: 200, ok: true}, {code: 204, ok: true}, {code: 301, ok: true}, {code: 304, ok: true}, {code: 399, ok: true},
		{code: 400}, {code: 404}, {code: 418}, {code: 500}, {code: 503}, {code: 599},
		{code: 200, expected: config.StatusRange{Min: 204, Max: 204}},
		{code: 204, ok: true, expected: config.StatusRange{Min: 204, Max: 204}},
		{code: 401, ok: true, expected: config.StatusRange{Min: 200, Max: 401}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.code, tt.expected), func(t *testing.T) {
			t.Parallel()
			s := startScripted(t, false)
			m, logs := newManager(t, slow)
			var st balance.State
			if tt.ok {
				st.SetUp(false) // a check that starts on a down endpoint starts down
			}
			hc := check(1, 1)
			hc.ExpectedStatus = tt.expected
			m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: hc}})
			s.answer(t, tt.code)
			want := msgDown
			if tt.ok {
				want = msgUp
			}
			if tr := waitLog(t, logs, want); tr.reason != fmt.Sprintf("status %d", tt.code) {
				t.Errorf("reason %q, want status %d", tr.reason, tt.code)
			}
			if st.Up() != tt.ok {
				t.Errorf("up %v after %d, want %v", st.Up(), tt.code, tt.ok)
			}
		})
	}
}

// rawEndpoint accepts connections and hands each to serve, which owns it.
// Everything it started ends before the test does.
func rawEndpoint(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			stop := context.AfterFunc(ctx, func() { c.Close() })
			serve(c)
			stop()
			c.Close()
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// TestFailureKinds checks that a refused connection, an endpoint that does
// not answer within timeout_s, a connection closed before an answer and
// an answer that is not HTTP all count as failures, with the error as the
// reason.
func TestFailureKinds(t *testing.T) {
	t.Parallel()
	hold := func(c net.Conn) { _, _ = io.Copy(io.Discard, c) } // until the checker or the test closes it
	// readRequest reads the check, so closing the connection afterwards
	// sends a clean end of stream rather than a reset.
	readRequest := func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			t.Errorf("read check: %v", err)
		}
	}
	tests := []struct {
		name   string
		addr   func(t *testing.T) string
		reason string
	}{
		{"refused", func(t *testing.T) string { return testnet.ClosedAddr(t) }, "connection refused"},
		{"timeout", func(t *testing.T) string { return rawEndpoint(t, hold) }, "i/o timeout"},
		{"closed", func(t *testing.T) string { return rawEndpoint(t, readRequest) }, "EOF"},
		{"not http", func(t *testing.T) string {
			return rawEndpoint(t, func(c net.Conn) {
				readRequest(c)
				_, _ = c.Write([]byte("SSH-2.0-OpenSSH\r\n\r\n"))
			})
		}, "malformed HTTP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, logs := newManager(t, slow)
			var st balance.State
			addr := tt.addr(t)
			start := time.Now()
			m.Reconcile([]Target{{Upstream: "u", Endpoint: addr, State: &st, Check: check(1, 1)}})
			tr := waitLog(t, logs, msgDown)
			if !strings.Contains(tr.reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", tr.reason, tt.reason)
			}
			if st.Up() {
				t.Error("endpoint still up")
			}
			if tt.name == "timeout" && time.Since(start) < time.Second {
				t.Errorf("timed out after %v, before timeout_s (1s)", time.Since(start))
			}
		})
	}
}

// TestHTTPS checks an https endpoint over TLS: with the server's
// certificate trusted the check reaches the handler; with the default
// roots the handshake fails and the endpoint goes down.
func TestHTTPS(t *testing.T) {
	t.Parallel()
	s := startScripted(t, true)
	roots := x509.NewCertPool()
	roots.AddCert(s.srv.Certificate())

	// A generous check timeout: the verdicts asserted are the answer's and
	// the certificate's, which a handshake slowed by a busy machine must
	// not turn into a timeout.
	hc := check(1, 1)
	hc.TimeoutS = 30
	log, logs := newLogger(t)
	m := NewManager(Options{Logger: log, Interval: slow, TLSConfig: &tls.Config{RootCAs: roots}})
	t.Cleanup(m.Close)
	var st balance.State
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: hc}})
	if p := s.answer(t, 503); p.host != strings.TrimPrefix(s.srv.URL, "https://") {
		t.Errorf("Host %q, want the endpoint's host:port", p.host)
	}
	if tr := waitLog(t, logs, msgDown); tr.reason != "status 503" {
		t.Errorf("reason %q, want status 503", tr.reason)
	}

	untrusted, logs2 := newManager(t, slow)
	var st2 balance.State
	untrusted.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st2, Check: hc}})
	if tr := waitLog(t, logs2, msgDown); !strings.Contains(tr.reason, "certificate") {
		t.Errorf("reason %q, want a certificate error", tr.reason)
	}
}

// TestReconcileKeepsUnchanged reconciles the same targets again and again:
// the checker is the same one, still running, with its verdict, and sends
// no extra check.
func TestReconcileKeepsUnchanged(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, slow)
	var st balance.State
	targets := []Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}}
	m.Reconcile(targets)
	s.answer(t, 500)
	waitLog(t, logs, msgDown)
	first := m.checkers[key{"u", s.addr()}]
	for range 100 {
		m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	}
	if c := m.checkers[key{"u", s.addr()}]; c != first {
		t.Fatal("an unchanged checker was replaced")
	}
	select {
	case <-first.done:
		t.Fatal("an unchanged checker stopped")
	default:
	}
	if st.Up() {
		t.Error("a down endpoint came up on reload")
	}
	m.Close()
	if n := s.count.Load(); n != 1 {
		t.Errorf("%d checks sent, want 1 (the first)", n)
	}
}

// TestReconcileRestartKeepsVerdict changes the settings of a down
// endpoint's check: the checker is replaced, the old goroutine has ended,
// the endpoint stays down, and the new checker checks the new path at once
// and brings it up after its own healthy threshold.
func TestReconcileRestartKeepsVerdict(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, fast)
	var st balance.State
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	s.answer(t, 500)
	waitLog(t, logs, msgDown)
	old := m.checkers[key{"u", s.addr()}]

	hc := check(2, 1)
	hc.Path = "/ready"
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: hc}})
	select {
	case <-old.done:
	default:
		t.Fatal("the replaced checker is still running after Reconcile")
	}
	if m.checkers[key{"u", s.addr()}] == old {
		t.Fatal("changed settings kept the old checker")
	}
	if st.Up() {
		t.Fatal("the endpoint came up when its check changed")
	}
	// The old checker's last check may still be on its way, and arrive
	// before or after the new checker's first: the new path's checks pass
	// until two have (the healthy threshold), the old path's fail, and no
	// more than that one of them comes.
	for passed, stray := 0, 0; passed < 2; {
		p := testrun.Recv(t, s.probes, "a check of /ready")
		if p.target == "/ready" {
			passed++
			p.reply <- 200
			continue
		}
		if stray++; stray > 1 {
			t.Fatalf("check %d of %s after Reconcile, want /ready", stray, p.target)
		}
		p.reply <- 500
	}
	waitLog(t, logs, msgUp)
	if !st.Up() {
		t.Error("endpoint down after the healthy threshold")
	}
}

// TestReconcileRemovedGoesUp removes the check of a down endpoint: the
// endpoint is up again and the checker has ended.
func TestReconcileRemovedGoesUp(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, slow)
	var st balance.State
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	s.answer(t, 500)
	waitLog(t, logs, msgDown)
	c := m.checkers[key{"u", s.addr()}]
	m.Reconcile(nil)
	if !st.Up() {
		t.Error("endpoint still down after its check was removed")
	}
	if m.Len() != 0 || len(m.tallies) != 0 {
		t.Errorf("%d checkers, %d tallies left, want none", m.Len(), len(m.tallies))
	}
	select {
	case <-c.done:
	default:
		t.Error("a removed checker is still running after Reconcile")
	}
	waitLog(t, logs, "health check stopped: endpoint no longer held down")
}

// TestSharedEndpoint checks one address named by two upstreams (one
// state): it is down while either check holds it down, and handing it
// from one upstream's check to another's does not bring it up.
func TestSharedEndpoint(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, fast)
	var st balance.State
	target := func(upstream string) Target {
		hc := check(1, 1)
		hc.Path = "/" + upstream
		return Target{Upstream: upstream, Endpoint: s.addr(), State: &st, Check: hc}
	}
	// answer answers checks by path until one of want's arrives, which
	// gets code; every other check gets other.
	answer := func(want string, code, other int) {
		t.Helper()
		for {
			p := testrun.Recv(t, s.probes, "a check of "+want)
			if p.target == want {
				p.reply <- code
				return
			}
			p.reply <- other
		}
	}

	m.Reconcile([]Target{target("a"), target("b")})
	answer("/a", 500, 200)
	if tr := waitLog(t, logs, msgDown); tr.upstream != "a" {
		t.Fatalf("down log of upstream %q, want a", tr.upstream)
	}
	for range 3 {
		answer("/b", 200, 500)
	}
	if st.Up() {
		t.Fatal("b's passing checks brought up an endpoint a holds down")
	}
	m.Reconcile([]Target{target("b")})
	if !st.Up() {
		t.Fatal("endpoint down after the only check holding it was removed")
	}
	answer("/b", 500, 500)
	if tr := waitLog(t, logs, msgDown); tr.upstream != "b" {
		t.Fatalf("down log of upstream %q, want b", tr.upstream)
	}

	// Hand the down endpoint from b's check to c's: it stays down until c
	// passes.
	m.Reconcile([]Target{target("c")})
	if st.Up() {
		t.Fatal("endpoint came up when its check moved to another upstream")
	}
	answer("/c", 200, 500)
	if tr := waitLog(t, logs, msgUp); tr.upstream != "c" {
		t.Fatalf("up log of upstream %q, want c", tr.upstream)
	}
	if !st.Up() {
		t.Fatal("endpoint down after c's check passed")
	}
}

// TestStopCutsCheck stops a checker whose check is waiting for an answer
// that will not come within the test: Reconcile returns at once, not after
// timeout_s.
func TestStopCutsCheck(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, _ := newManager(t, slow)
	var st balance.State
	hc := check(1, 1)
	hc.TimeoutS = 3600
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: hc}})
	testrun.Recv(t, s.probes, "the first check") // never answered
	start := time.Now()
	m.Reconcile(nil)
	if d := time.Since(start); d > testrun.Timeout/2 {
		t.Errorf("stopping a checker mid-check took %v", d)
	}
	if !st.Up() {
		t.Error("a cut check counted as a failure")
	}
}

// TestCloseStopsEverything closes a Manager with checkers running: they have
// ended when Close returns, and a later Reconcile starts nothing.
func TestCloseStopsEverything(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, logs := newManager(t, slow)
	var st balance.State
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	s.answer(t, 500)
	waitLog(t, logs, msgDown)
	c := m.checkers[key{"u", s.addr()}]
	m.Close()
	select {
	case <-c.done:
	default:
		t.Fatal("a checker is still running after Close")
	}
	if !st.Up() {
		t.Error("endpoint still held down after Close")
	}
	m.Reconcile([]Target{{Upstream: "u", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	if m.Len() != 0 {
		t.Errorf("Reconcile after Close started %d checkers", m.Len())
	}
	m.Close()
}

// TestManyReconciles alternates two target sets 1,000 times: one checker
// unchanged throughout, one whose settings change every time, one that
// comes and goes. The kept checker sends one check in all; the goroutines
// running checkers are exactly the checkers declared, and none after Close.
// Not parallel, so the goroutine counts are this test's alone.
func TestManyReconciles(t *testing.T) {
	var hits [3]atomic.Int64
	checked := make(chan struct{}, 1)
	addrs := make([]string, 3)
	for i := range addrs {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			if i == 0 {
				select {
				case checked <- struct{}{}:
				default:
				}
			}
		}))
		t.Cleanup(srv.Close)
		addrs[i] = strings.TrimPrefix(srv.URL, "http://")
	}
	waitRunners(t, 0)
	ignore := goleak.IgnoreCurrent()
	before := runtime.NumGoroutine()
	m, _ := newManager(t, slow)
	var states [3]balance.State
	changed := check(2, 2)
	changed.TimeoutS = 2
	a := []Target{
		{Upstream: "kept", Endpoint: addrs[0], State: &states[0], Check: check(2, 2)},
		{Upstream: "changing", Endpoint: addrs[1], State: &states[1], Check: check(2, 2)},
		{Upstream: "coming", Endpoint: addrs[2], State: &states[2], Check: check(2, 2)},
	}
	b := []Target{a[0], {Upstream: "changing", Endpoint: addrs[1], State: &states[1], Check: changed}}
	kept := (*checker)(nil)
	for i := range 1000 {
		if i == 1 {
			testrun.Recv(t, checked, "the first check of the unchanged endpoint")
		}
		want := a
		if i%2 == 1 {
			want = b
		}
		m.Reconcile(want)
		if m.Len() != len(want) {
			t.Fatalf("reconcile %d: %d checkers, want %d", i, m.Len(), len(want))
		}
		if c := m.checkers[key{"kept", addrs[0]}]; kept == nil {
			kept = c
		} else if c != kept {
			t.Fatalf("reconcile %d replaced the unchanged checker", i)
		}
	}
	declared := m.Len()
	during := waitRunners(t, len(b))
	m.Close()
	after := waitRunners(t, 0)
	goleak.VerifyNone(t, ignore)
	t.Logf("checker goroutines: %d running after 1,000 reconciles (%d declared), %d after Close; all goroutines: %d before, %d after Close",
		during, declared, after, before, runtime.NumGoroutine())
	if n := hits[0].Load(); n != 1 {
		t.Errorf("the unchanged checker sent %d checks, want 1", n)
	}
	if len(m.tallies) != 0 {
		t.Errorf("%d tallies left after Close", len(m.tallies))
	}
}

func TestEscapeTarget(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/healthz":     "/healthz",
		"/a?b=c&d=%20": "/a?b=c&d=%20",
		"/caf\u00e9":   "/caf%C3%A9",
		"/x\x7f":       "/x%7F",
	} {
		if got := escapeTarget(in); got != want {
			t.Errorf("escapeTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestPassingCheckEndsPassiveHistory: a passing check ends the passive
// checks' failure streak (the next transport failure starts a new one), and
// a checker that starts on an endpoint the passive checks ejected starts up:
// only the active verdict holds an endpoint down for a check.
func TestPassingCheckEndsPassiveHistory(t *testing.T) {
	t.Parallel()
	s := startScripted(t, false)
	m, _ := newManager(t, fast)
	var st balance.State
	st.PassiveFailure()
	st.PassiveFailure()
	if _, ok := st.Eject(); !ok {
		t.Fatal("Eject refused on an endpoint that is not ejected")
	}
	m.Reconcile([]Target{{Upstream: "api", Endpoint: s.addr(), State: &st, Check: check(1, 1)}})
	if st.MarkedDown() {
		t.Fatal("a check that started on an ejected endpoint holds it down")
	}
	s.answer(t, 200)
	// The next check arrives only after the first was counted.
	p := testrun.Recv(t, s.probes, "the second check")
	if n := st.PassiveFailure(); n != 1 {
		t.Errorf("after a passing check, a transport failure makes a streak of %d, want 1", n)
	}
	p.reply <- 200
}
