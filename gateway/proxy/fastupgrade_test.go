package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// startFastGateway is startGateway on the fasthttp front with the
// options o (Metrics is the gateway's own registry).
func startFastGateway(t testing.TB, o Options) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Metrics = reg
	p := New(o)
	t.Cleanup(p.Close)
	return &gateway{Proxy: p, URL: "http://" + serveFast(t, p, nil), reg: reg}
}

// waitCount waits, at most testrun.Timeout, until dwara_requests_total of
// service web, upstream u and code reaches want.
func waitCount(t *testing.T, g *gateway, u, code string, want float64) {
	t.Helper()
	deadline := time.Now().Add(testrun.Timeout)
	for testutil.ToFloat64(g.m.requests.WithLabelValues("web", u, code)) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%v requests counted %s, want %v; counts: %v", testutil.ToFloat64(g.m.requests.WithLabelValues("web", u, code)), code, want, g.samples(t, "dwara_requests_total"))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
	}
}

// checkIdle fails the test unless every endpoint of upstream u comes to
// have no request in flight (within testrun.Timeout).
func checkIdle(t *testing.T, g *gateway, u string) {
	t.Helper()
	// An exchange's bookkeeping ends after its answer reached the client
	// (in the handler's defer, on the net/http front after the last write
	// of the body): a client that has read the whole answer may look
	// first. So wait for it; a count that never comes back fails.
	for _, ep := range g.table.Load().upstreams[u].endpoints {
		testrun.Eventually(t, fmt.Sprintf("endpoint %s with no request in flight (%d when the wait began)", ep.Addr, ep.state.Inflight()),
			func() bool { return ep.state.Inflight() == 0 })
	}
}

// tunnelUpstream answers an upgrade request to websocket with 101, its
// first server bytes in the same write as the head, then echoes until the
// proxy closes its side; it reports each request's header on heads, and
// the end of each tunnel on ended.
func tunnelUpstream(t *testing.T) (addr string, heads chan http.Header, ended chan struct{}) {
	heads, ended = make(chan http.Header, 8), make(chan struct{}, 8)
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set("X-Seen-Target", r.RequestURI)
		heads <- h
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "no upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { ended <- struct{}{} }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\nhello from upstream\n")
		if brw.Flush() != nil {
			return
		}
		_, _ = io.Copy(c, brw) // echo until the proxy closes its side
	}))
	return up.Listener.Addr().String(), heads, ended
}

// TestFastUpgradeTunnel: an upgrade request through the fasthttp front
// reaches the endpoint with the gateway's fields and Connection: Upgrade,
// without the client's other hop-by-hop fields; the 101 comes back with
// the endpoint's fields, the sticky cookie and the request id, and no
// Content-Type it did not send; bytes the client sent right behind its
// head and those the endpoint sent right behind its 101 both arrive; the
// tunnel echoes; when the client hangs up both sides close, and the
// request is counted 101 with nothing left in flight.
func TestFastUpgradeTunnel(t *testing.T) {
	t.Parallel()
	addr, heads, ended := tunnelUpstream(t)
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u, sticky: {cookie: sid}}]\n", addr))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /socket?room=1 HTTP/1.1", "Host: "+hostOf(g.URL), "Connection: keep-alive, Upgrade, X-Hop",
		"Upgrade: websocket", "X-Hop: secret", "Keep-Alive: timeout=5", "X-Request-Id: tunnel-1",
		"X-Dwara-Service: forged", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==") +
		"early bytes\n")
	resp := rc.read(http.MethodGet)
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
		!listsToken(resp.Header, "Connection", "upgrade") {
		t.Fatalf("response %d, Upgrade %q, Connection %q; want 101 to websocket", resp.StatusCode, resp.Header.Get("Upgrade"), resp.Header.Get("Connection"))
	}
	if got := resp.Header.Get("Sec-Websocket-Accept"); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Errorf("Sec-WebSocket-Accept %q", got)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "tunnel-1" {
		t.Errorf("X-Request-Id %q, want the client's", got)
	}
	if len(resp.Cookies()) != 1 || resp.Cookies()[0].Name != "sid" {
		t.Errorf("cookies %v, want the sticky session's", resp.Cookies())
	}
	if ct, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q on the 101, which the endpoint did not send", ct)
	}
	h := recvWithin(t, heads, "request at the endpoint")
	for k, want := range map[string]string{
		"X-Seen-Target": "/socket?room=1", "Connection": "Upgrade", "Upgrade": "websocket",
		"X-Request-Id": "tunnel-1", "X-Dwara-Service": "web", "X-Dwara-Upstream": "u", "X-Dwara-Generation": "1",
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Hop": "", "Keep-Alive": "",
		"Sec-Websocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
	} {
		if got := strings.Join(h.Values(k), ","); got != want {
			t.Errorf("endpoint got %s %q, want %q", k, got, want)
		}
	}
	line, err := rc.br.ReadString('\n')
	if err != nil || line != "hello from upstream\n" {
		t.Fatalf("first bytes of the endpoint: %q, %v", line, err)
	}
	if line, err := rc.br.ReadString('\n'); err != nil || line != "early bytes\n" {
		t.Fatalf("echo of the bytes behind the request head: %q, %v", line, err)
	}
	checkEchoes(t, rc, "ping", strings.Repeat("frame-", 20000), "\x00\x01binary\xff")
	rc.c.Close()
	recvWithin(t, ended, "end of the tunnel at the endpoint")
	waitCount(t, g, "u", "101", 1)
	checkIdle(t, g, "u")
}

// checkEchoes writes each of msgs on the tunnel rc and wants it back, byte
// for byte, from an endpoint that echoes.
func checkEchoes(t *testing.T, rc *rawConn, msgs ...string) {
	t.Helper()
	for i, msg := range msgs {
		rc.write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(rc.br, got); err != nil {
			t.Fatalf("message %d: reading the echo: %v", i, err)
		}
		if string(got) != msg {
			t.Fatalf("message %d: echo differs", i)
		}
	}
}

// TestFastUpgradeEndpointCloses: an endpoint that ends the tunnel ends the
// client's side too.
func TestFastUpgradeEndpointCloses(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\nbye")
		_ = brw.Flush()
		c.Close()
	}))
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", up.Listener.Addr().String()))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET / HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: test"))
	if resp := rc.read(http.MethodGet); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", resp.StatusCode)
	}
	rest, err := io.ReadAll(rc.br) // the conn's deadline bounds it
	if err != nil || string(rest) != "bye" {
		t.Fatalf("after the 101: %q, %v; want the endpoint's bytes and the end", rest, err)
	}
	waitCount(t, g, "u", "101", 1)
	checkIdle(t, g, "u")
}

// TestFastUpgradeNotSwitched: an endpoint that answers an upgrade request
// without switching is relayed as any answer, on a connection that serves
// the next request; one that switches to another protocol than asked is
// answered 502.
func TestFastUpgradeNotSwitched(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/refuse":
			w.Header().Set("X-Why", "no sockets here")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, "forbidden")
		case "/other":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
			_ = brw.Flush()
		default:
			fmt.Fprint(w, "plain")
		}
	}))
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", up.Listener.Addr().String()))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /refuse HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket"))
	resp, body := rc.readFinal(http.MethodGet)
	if resp.StatusCode != http.StatusForbidden || string(body) != "forbidden" || resp.Header.Get("X-Why") != "no sockets here" {
		t.Fatalf("refused upgrade: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	rc.write(rawHead("GET /next HTTP/1.1", "Host: x"))
	if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK || string(body) != "plain" {
		t.Fatalf("next request on the connection: %d %q", resp.StatusCode, body)
	}
	rc = dialRaw(t, g)
	rc.write(rawHead("GET /other HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket"))
	if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("switch to another protocol: %d %q, want 502", resp.StatusCode, body)
	}
	waitCount(t, g, "u", "403", 1)
	waitCount(t, g, "u", "502", 1)
	checkIdle(t, g, "u")
}

// TestFastUpgradePipelined: an upgrade pipelined behind an ordinary
// request gets its 101 after that request's answer, which fasthttp still
// held, and the tunnel works.
func TestFastUpgradePipelined(t *testing.T) {
	t.Parallel()
	addr, _, ended := tunnelUpstream(t)
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", addr))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /first HTTP/1.1", "Host: x") +
		rawHead("GET /socket HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket"))
	if resp, _ := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusBadRequest { // the upstream's "no upgrade"
		t.Fatalf("first answer %d, want the endpoint's 400", resp.StatusCode)
	}
	if resp := rc.read(http.MethodGet); resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("second answer %d, want 101", resp.StatusCode)
	}
	if line, err := rc.br.ReadString('\n'); err != nil || line != "hello from upstream\n" {
		t.Fatalf("first bytes of the endpoint: %q, %v", line, err)
	}
	rc.write("echo\n")
	if line, err := rc.br.ReadString('\n'); err != nil || line != "echo\n" {
		t.Fatalf("echo: %q, %v", line, err)
	}
	rc.c.Close()
	recvWithin(t, ended, "end of the tunnel at the endpoint")
	waitCount(t, g, "u", "101", 1)
	checkIdle(t, g, "u")
}

// TestFastUpgradeFailures: an upgrade to an endpoint that refuses the
// connection is answered 502 and counts for the passive checks (ejecting
// the endpoint at the third), and is not retried; one to an endpoint that
// never answers is answered 504 at the response-header timeout.
func TestFastUpgradeFailures(t *testing.T) {
	t.Parallel()
	hung := startHungUpstream(t)
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q], response_header_timeout_ms: 300}]\nservices: [{name: web, upstream: u}]\n", hung.addr))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /ws HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket"))
	if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("hung endpoint: %d %q, want 504 problem+json", resp.StatusCode, body)
	}
	recvWithin(t, hung.requests, "request at the hung endpoint")
	checkIdle(t, g, "u")

	good := startPool(t, "good", 1)
	dead := startFastGateway(t, Options{})
	dead.apply(t, 1, upstreamSpec("", testnet.ClosedAddr(t), good.Addrs[0]))
	hdr := map[string]string{"Connection": "Upgrade", "Upgrade": "test"}
	failed := 0
	for i := 0; failed < 3; i++ {
		if i == 20 {
			t.Fatalf("only %d of 20 upgrade requests reached the closed port", failed)
		}
		if _, ej := dead.counted("u"); ej != 0 {
			t.Fatalf("ejected after %d failures, want 3", failed)
		}
		if resp, _ := get(t, client, dead.URL+"/", hdr); resp.StatusCode == http.StatusBadGateway {
			failed++
		}
	}
	if retries, ejections := dead.counted("u"); ejections != 1 || retries != 0 {
		t.Errorf("%v ejections, %v retries after 3 failed upgrades; want 1, 0", ejections, retries)
	}
	checkIdle(t, dead, "u")
}
