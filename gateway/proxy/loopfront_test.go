//go:build linux

package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/internal/testnet"
)

// The loop front's own tests: which requests it serves itself, which it
// hands over and when, and that the answer is the same either way. The
// whole proxy suite also runs on it (eachFront).

// loopGateway is a gateway on the loop front, with its server for the
// tests that stop it.
type loopGateway struct {
	*gateway
	*loopServing
}

// startLoopGateway serves a new proxy with the loop front, at most
// maxConns connections (0: no cap), after configure (when non-nil)
// adjusted its fasthttp server.
func startLoopGateway(t *testing.T, maxConns int, configure func(*fasthttp.Server)) *loopGateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg})
	t.Cleanup(p.Close)
	ls := startLoop(t, p, maxConns, configure)
	return &loopGateway{gateway: &gateway{Proxy: p, URL: "http://" + ls.addr, reg: reg}, loopServing: ls}
}

// paths returns the loop front's counts: inline, handed over, continued.
func (g *loopGateway) paths() [3]float64 {
	return [3]float64{testutil.ToFloat64(g.m.loopInline), testutil.ToFloat64(g.m.loopHandedOver), testutil.ToFloat64(g.m.loopContinued)}
}

// countingUpstream serves h and counts the connections it accepted.
func countingUpstream(t *testing.T, h http.Handler) (addr string, conns *atomic.Int64) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	conns = new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return hostOf(srv.URL), conns
}

// oneConnClient is a client that keeps one connection to the gateway.
func oneConnClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: conformanceDeadline}
}

func TestLoopFrontServesInline(t *testing.T) {
	var mu sync.Mutex
	var last http.Header
	addr, upConns := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		last = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("X-Hop", "not for the client")
		w.Header().Set("Keep-Alive", "timeout=5")
		switch r.URL.Path {
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/same":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("X-Path", r.URL.Path)
			fmt.Fprintf(w, "path=%s", r.URL.Path)
		}
	}))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 7, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	c := oneConnClient(t)
	const n = 50
	for i := range n {
		path := fmt.Sprintf("/p%d", i)
		resp, body := get(t, c, g.URL+path, map[string]string{"Connection": "X-Drop", "X-Drop": "1", "X-Dwara-Service": "forged"})
		if resp.StatusCode != 200 || body != "path="+path || resp.Header.Get("X-Path") != path {
			t.Fatalf("GET %s: %d %q %v", path, resp.StatusCode, body, resp.Header)
		}
		if resp.Header.Get("X-Hop") != "" || resp.Header.Get("Keep-Alive") != "" || len(resp.Header.Get("X-Request-Id")) != 32 {
			t.Fatalf("GET %s: answer header %v", path, resp.Header)
		}
	}
	mu.Lock()
	h := last
	mu.Unlock()
	for k, want := range map[string]string{"X-Dwara-Service": "web", "X-Dwara-Upstream": "a", "X-Dwara-Generation": "7",
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": hostOf(g.URL), "X-Forwarded-Proto": "http", "X-Drop": ""} {
		if got := h.Get(k); got != want {
			t.Errorf("upstream got %s %q, want %q (header %v)", k, got, want, h)
		}
	}
	for _, tc := range []struct {
		method, path string
		code         int
		length       string
	}{
		{"HEAD", "/h", 200, "7"}, {"GET", "/empty", 204, ""}, {"GET", "/same", 304, ""},
	} {
		req, _ := http.NewRequest(tc.method, g.URL+tc.path, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || len(body) != 0 || resp.Header.Get("Content-Length") != tc.length {
			t.Errorf("%s %s: %d, body %q, Content-Length %q; want %d, none, %q", tc.method, tc.path, resp.StatusCode, body, resp.Header.Get("Content-Length"), tc.code, tc.length)
		}
	}
	if got := g.paths(); got != [3]float64{n + 3, 0, 0} {
		t.Errorf("inline, handed over, continued = %v, want [%d 0 0]", got, n+3)
	}
	if got := upConns.Load(); got != 1 {
		t.Errorf("the upstream saw %d connections, want 1 (the loop's pooled one)", got)
	}
	if got := testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "200")); got != n+1 {
		t.Errorf("dwara_requests_total{code=200} = %v, want %d", got, n+1)
	}
	if got := g.Proxy.table.Load().upstreams["a"].endpoints[0].state.Inflight(); got != 0 {
		t.Errorf("in flight after the answers: %d", got)
	}
}

func TestLoopFrontRefusalsInline(t *testing.T) {
	g := startLoopGateway(t, 0, nil)
	c := oneConnClient(t)
	if resp, _ := get(t, c, g.URL+"/", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("before a generation: %d, want 503", resp.StatusCode)
	}
	g.apply(t, 1, "upstreams: [{name: a, endpoints: [\"127.0.0.1:1\"]}]\nservices: [{name: web, upstream: a, base_path: /web}]\n")
	resp, body := get(t, c, g.URL+"/other", nil)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "No service matches") {
		t.Errorf("no match: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	rc := dialRaw(t, g.gateway)
	rc.write(rawHead("GET /web/%2e%2e/admin HTTP/1.1", "Host: x"))
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("dot segment: %d, want 400", resp.StatusCode)
	}
	if got := g.paths(); got != [3]float64{3, 0, 0} {
		t.Errorf("inline, handed over, continued = %v, want [3 0 0]", got)
	}
}

func TestLoopFrontHandsOver(t *testing.T) {
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.Path, b)
	}))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	rc := dialRaw(t, g.gateway)
	// A body: the connection goes to the fasthttp front, which serves it
	// and the next request on it.
	rc.write(rawHead("POST /up HTTP/1.1", "Host: x", "Content-Length: 5") + "hello")
	if resp, body := rc.readFinal("POST"); resp.StatusCode != 200 || string(body) != "POST /up hello" {
		t.Fatalf("POST: %d %q", resp.StatusCode, body)
	}
	rc.write(rawHead("GET /next HTTP/1.1", "Host: x"))
	if resp, body := rc.readFinal("GET"); resp.StatusCode != 200 || string(body) != "GET /next " {
		t.Fatalf("GET after: %d %q", resp.StatusCode, body)
	}
	// HTTP/1.0 and a request with Expect are handed over too; a head
	// with a bare LF is, and is refused there.
	for _, head := range []string{"GET /old HTTP/1.0\r\nHost: x\r\n\r\n", rawHead("PUT /e HTTP/1.1", "Host: x", "Expect: 100-continue", "Content-Length: 0")} {
		rc := dialRaw(t, g.gateway)
		rc.write(head)
		if resp, _ := rc.readFinal("GET"); resp.StatusCode != 200 && resp.StatusCode != 100 {
			t.Errorf("%q: %d", head, resp.StatusCode)
		}
	}
	rc = dialRaw(t, g.gateway)
	rc.write("GET / HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n")
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bare LF: %d, want 400", resp.StatusCode)
	}
	rc = dialRaw(t, g.gateway)
	rc.write(rawHead("GET / HTTP/1.1", "Host: x", "X-Big: "+strings.Repeat("b", 20<<10)))
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 20 KiB head: %d, want 431", resp.StatusCode)
	}
	if got := g.paths(); got[1] != 5 || got[2] != 0 {
		t.Errorf("inline, handed over, continued = %v, want 5 handed over, none continued", got)
	}
}

func TestLoopFrontContinuesStreamedAnswers(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 8<<10) // 128 KiB: more than the loop's buffer
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			io.WriteString(w, "part one,")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part two")
			w.Header().Set("X-Sum", "42")
		case "/big":
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			io.WriteString(w, big)
		case "/split":
			w.Header().Set("Content-Length", "10000")
			io.WriteString(w, strings.Repeat("s", 5000))
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
			io.WriteString(w, strings.Repeat("s", 5000))
		case "/hints":
			w.Header().Set("Link", "</a.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			io.WriteString(w, "after hints")
		default:
			io.WriteString(w, "small")
		}
	}))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	// A small answer whose body comes in two pieces is relayed inline.
	rc := dialRaw(t, g.gateway)
	rc.write(rawHead("GET /split HTTP/1.1", "Host: x"))
	if resp, body := rc.readFinal("GET"); resp.StatusCode != 200 || string(body) != strings.Repeat("s", 10000) {
		t.Fatalf("GET /split: %d, %d bytes", resp.StatusCode, len(body))
	}
	// Each streamed answer continues on the fasthttp front's path, which
	// then serves the rest of its connection.
	for _, tc := range []struct{ path, body string }{
		{"/chunked", "part one,part two"}, {"/big", big}, {"/hints", "after hints"},
	} {
		rc := dialRaw(t, g.gateway)
		for _, path := range []string{tc.path, "/small"} {
			rc.write(rawHead("GET "+path+" HTTP/1.1", "Host: x"))
			resp, body := rc.readFinal("GET")
			want := tc.body
			if path == "/small" {
				want = "small"
			}
			if resp.StatusCode != 200 || string(body) != want {
				t.Fatalf("GET %s: %d, %d bytes, want %d", path, resp.StatusCode, len(body), len(want))
			}
			if got := resp.Header.Get("Server"); got != "dwara" {
				t.Errorf("GET %s: Server %q, want dwara (as the fasthttp front names itself)", path, got)
			}
			if path == "/chunked" && resp.Trailer.Get("X-Sum") != "42" {
				t.Errorf("trailer: %v", resp.Trailer)
			}
		}
	}
	if got := g.paths(); got != [3]float64{1, 0, 3} {
		t.Errorf("inline, handed over, continued = %v, want [1 0 3]", got)
	}
	if got := g.Proxy.table.Load().upstreams["a"].endpoints[0].state.Inflight(); got != 0 {
		t.Errorf("in flight: %d", got)
	}
}

func TestLoopFrontFailures(t *testing.T) {
	live, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "live") }))
	closed := testnet.ClosedAddr(t)
	hung := startHungUpstream(t)
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf(`upstreams:
  - {name: half, endpoints: [%q, %q]}
  - {name: dead, endpoints: [%q]}
  - {name: hung, endpoints: [%q], response_header_timeout_ms: 300}
services:
  - {name: half, upstream: half, base_path: /half}
  - {name: dead, upstream: dead, base_path: /dead}
  - {name: hung, upstream: hung, base_path: /hung}
`, closed, live, closed, hung.addr))
	// A new connection each time: a connection whose exchange continued
	// on the fasthttp front's path stays there.
	tr := &http.Transport{DisableKeepAlives: true}
	c := &http.Client{Transport: tr, Timeout: conformanceDeadline}
	// A refused connect is retried on the other endpoint (a GET is safe to
	// send again).
	for i := range 6 {
		if resp, body := get(t, c, g.URL+"/half", nil); resp.StatusCode != 200 || body != "live" {
			t.Fatalf("%d: /half: %d %q", i, resp.StatusCode, body)
		}
	}
	if resp, body := get(t, c, g.URL+"/dead", nil); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Upstream unreachable") {
		t.Errorf("/dead: %d %q", resp.StatusCode, body)
	}
	if resp, body := get(t, c, g.URL+"/hung", nil); resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(body, "Upstream timeout") {
		t.Errorf("/hung: %d %q", resp.StatusCode, body)
	}
	if got := g.paths(); got[1] != 0 || got[2] < 3 {
		t.Errorf("inline, handed over, continued = %v, want the failures continued (3 at least)", got)
	}
	for _, name := range []string{"half", "dead", "hung"} {
		for _, ep := range g.Proxy.table.Load().upstreams[name].endpoints {
			if n := ep.state.Inflight(); n != 0 {
				t.Errorf("%s %s: %d in flight", name, ep.addr, n)
			}
		}
	}
}

// A pooled connection the endpoint closed while it was idle is replaced by
// a new one, and the request is not failed.
func TestLoopFrontStalePooledConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { // one answer per connection, then it is closed while idle
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}()
		}
	}()
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", ln.Addr().String()))
	c := oneConnClient(t)
	for i := range 5 {
		if resp, body := get(t, c, g.URL+"/", nil); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d: %d %q", i, resp.StatusCode, body)
		}
		// Let the endpoint's close reach the loop's pool, or not: either
		// way the request must succeed.
		if i%2 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if got := accepted.Load(); got != 5 {
		t.Errorf("the endpoint accepted %d connections, want one per request (5)", got)
	}
	if got := g.Proxy.table.Load().upstreams["a"].endpoints[0].state.Inflight(); got != 0 {
		t.Errorf("in flight: %d", got)
	}
}

// A client that goes away while the endpoint has not answered is counted
// 499 and its exchange ended.
func TestLoopFrontClientGone(t *testing.T) {
	hung := startHungUpstream(t)
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", hung.addr))
	rc := dialRaw(t, g.gateway)
	rc.write(rawHead("GET / HTTP/1.1", "Host: x"))
	recvWithin(t, hung.requests, "the request at the endpoint")
	rc.c.Close()
	ep := g.Proxy.table.Load().upstreams["a"].endpoints[0]
	deadline := time.Now().Add(conformanceDeadline)
	for testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "499")) != 1 || ep.state.Inflight() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("499 count %v, in flight %d", testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "499")), ep.state.Inflight())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if g.srv.Conns() != 0 {
		t.Errorf("%d connections open after the client went", g.srv.Conns())
	}
}

func TestLoopFrontPipelining(t *testing.T) {
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.URL.Path) }))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	rc := dialRaw(t, g.gateway)
	rc.write(rawHead("GET /1 HTTP/1.1", "Host: x") + rawHead("GET /2 HTTP/1.1", "Host: x") + rawHead("GET /3 HTTP/1.1", "Host: x", "Connection: close"))
	for _, want := range []string{"/1", "/2", "/3"} {
		if resp, body := rc.readFinal("GET"); resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("want %s: %d %q", want, resp.StatusCode, body)
		}
	}
	if _, err := rc.br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close: %v, want the connection closed", err)
	}
	if got := g.paths(); got != [3]float64{3, 0, 0} {
		t.Errorf("inline, handed over, continued = %v, want [3 0 0]", got)
	}
}

func TestLoopFrontConnectionCap(t *testing.T) {
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	g := startLoopGateway(t, 1, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	first := dialRaw(t, g.gateway)
	first.write(rawHead("GET / HTTP/1.1", "Host: x"))
	if resp, _ := first.readFinal("GET"); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	second := dialRaw(t, g.gateway) // the kernel completes the handshake; the loop does not take it
	second.write(rawHead("GET / HTTP/1.1", "Host: x"))
	_ = second.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := second.br.Peek(1); err == nil {
		t.Fatal("a second connection was served while the cap of 1 was taken")
	}
	first.c.Close()
	_ = second.c.SetReadDeadline(time.Now().Add(conformanceDeadline))
	if resp, _ := second.readFinal("GET"); resp.StatusCode != 200 {
		t.Fatalf("second, once the first closed: %d", resp.StatusCode)
	}
}

func TestLoopFrontTimeouts(t *testing.T) {
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	g := startLoopGateway(t, 0, func(s *fasthttp.Server) {
		s.ReadTimeout = 300 * time.Millisecond
		s.IdleTimeout = 300 * time.Millisecond
	})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	// A head that stops half way is answered 408 and closed.
	rc := dialRaw(t, g.gateway)
	rc.write("GET / HTTP/1.1\r\nHost: x\r\n")
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled head: %d, want 408", resp.StatusCode)
	}
	if _, err := rc.br.ReadByte(); err != io.EOF {
		t.Errorf("after the 408: %v, want the connection closed", err)
	}
	// A keep-alive connection idle past the idle timeout is closed.
	rc = dialRaw(t, g.gateway)
	rc.write(rawHead("GET / HTTP/1.1", "Host: x"))
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	if _, err := rc.br.ReadByte(); err != io.EOF {
		t.Errorf("idle: %v, want the connection closed", err)
	}
}

func TestLoopFrontShutdown(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	addr, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-time.After(conformanceDeadline):
			}
		}
		io.WriteString(w, "done")
	}))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr))
	idle := dialRaw(t, g.gateway)
	idle.write(rawHead("GET / HTTP/1.1", "Host: x"))
	if resp, _ := idle.readFinal("GET"); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	busy := dialRaw(t, g.gateway)
	busy.write(rawHead("GET /slow HTTP/1.1", "Host: x"))
	recvWithin(t, arrived, "the slow request at the endpoint")
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), conformanceDeadline)
		defer cancel()
		stopped <- g.srv.Shutdown(ctx)
	}()
	if _, err := idle.br.ReadByte(); err != io.EOF {
		t.Errorf("the idle connection at shutdown: %v, want it closed", err)
	}
	close(release)
	resp, body := busy.readFinal("GET")
	if resp.StatusCode != 200 || string(body) != "done" || !resp.Close {
		t.Errorf("the request in flight: %d %q, close %v; want 200, its answer, Connection: close", resp.StatusCode, body, resp.Close)
	}
	if err := recvWithin(t, stopped, "Shutdown"); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	recvWithin(t, g.served, "Serve returning")
	if _, err := net.DialTimeout("tcp", hostOf(g.URL), time.Second); err == nil {
		t.Error("the listener still accepts after Shutdown")
	}
}

// headEnd called as a head arrives, resuming where it stopped, finds what
// it finds on the whole input at once, at every length.
func TestHeadEndIncremental(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\nX: 1\r\n\r\n",
		"GET / HTTP/1.1\nHost: x\n\n",
		"GET / HTTP/1.1\r\nX: a\r\n\r",
		"\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody with a bare \n after the head",
	} {
		for _, step := range []int{1, 2, 3, 5, 7} {
			scanned := 0
			for n := step; ; n += step {
				n = min(n, len(in))
				b := []byte(in[:n])
				end, bare := headEnd(b, scanned)
				wantEnd, wantBare := headEnd(b, 0)
				if end != wantEnd || bare != wantBare {
					t.Fatalf("%q in steps of %d, at %d: headEnd = %d, %v; on the whole: %d, %v", in, step, n, end, bare, wantEnd, wantBare)
				}
				if end >= 0 || bare || n == len(in) {
					break
				}
				scanned = n
			}
		}
	}
	if end, bare := headEnd([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0); end != 27 || bare {
		t.Errorf("headEnd = %d, %v; want 27, false", end, bare)
	}
	if _, bare := headEnd([]byte("GET / HTTP/1.1\r\nHost: x\n\r\n"), 0); !bare {
		t.Error("a bare LF not found")
	}
}

// TestLoopFrontDrainsRemovedPoolsAtApply: the loop's idle connections to
// an endpoint that a generation removed are closed at its next tick, with
// no request needed to meet the new table.
func TestLoopFrontDrainsRemovedPoolsAtApply(t *testing.T) {
	t.Parallel()
	closed := make(chan struct{}, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			offerSeen(closed, struct{}{})
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	other, _ := countingUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	g := startLoopGateway(t, 0, nil)
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", hostOf(srv.URL)))
	c := oneConnClient(t)
	if resp, _ := get(t, c, g.URL+"/", nil); resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	if p := g.paths(); p[0] != 1 {
		t.Fatalf("paths = %v, want the request served inline (its connection in the loop's pool)", p)
	}
	g.apply(t, 2, fmt.Sprintf("upstreams: [{name: b, endpoints: [%q]}]\nservices: [{name: web, upstream: b}]\n", other))
	recvWithin(t, closed, "the removed endpoint's connection closed")
}

// TestLoopFrontRequestLineAtOnce: a request line the head validation
// refuses (head.go) is answered 400 as soon as it is in, without waiting
// for the rest of a head (an HTTP/0.9 line has none) or the head timeout,
// and the connection closed.
func TestLoopFrontRequestLineAtOnce(t *testing.T) {
	t.Parallel()
	rec := startRawRecorder(t)
	g := startLoopGateway(t, 0, func(s *fasthttp.Server) { s.ReadTimeout = time.Hour })
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", rec.addr))
	for _, line := range []string{"GET /\r\n", "GET  / HTTP/1.1\r\n", "GET / HTTP/1.1 x\r\n"} {
		rc := dialRaw(t, g.gateway) // its reads end within conformanceDeadline, far short of the hour
		rc.write(line)
		resp, body := rc.readFinal(http.MethodGet)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "request line") {
			t.Errorf("%q: %d %s; want 400 naming the request line", line, resp.StatusCode, body)
		}
		if _, err := rc.br.ReadByte(); err != io.EOF {
			t.Errorf("%q: after the 400: %v, want the connection closed", line, err)
		}
	}
	if n := rec.count(); n != 0 {
		t.Errorf("the endpoint got %d requests", n)
	}
}
