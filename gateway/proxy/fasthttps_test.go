package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
)

// startTLSUpstream serves h over TLS on a loopback listener, closed when
// the test ends, and returns it with its endpoint ("https://host:port").
func startTLSUpstream(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	return srv, "https://" + srv.Listener.Addr().String()
}

// tlsTransport is a transport that trusts srv's certificate, with the
// given response-header timeout (0: none).
func tlsTransport(srv *httptest.Server, header time.Duration) *http.Transport {
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = header
	return tr
}

// tlsSeen is a request as the TLS upstream received it.
type tlsSeen struct {
	target, host string
	header       http.Header
	body         string
	trailer      http.Header
}

// TestFastHTTPSEndpoint: requests to an https endpoint through the fasthttp
// front, one after the other on one client connection: the endpoint gets
// the target as it was sent and the header by the front's rules (the
// gateway's fields, X-Forwarded-For appended to, the client's hop-by-hop
// and X-Dwara-* fields gone, no User-Agent of Go's); a body, chunked with
// a trailer, streams to it; the answers come back with the endpoint's
// fields but its hop-by-hop ones, the request id, a chunked answer with
// its trailer, a HEAD with its length, and a large body whole.
func TestFastHTTPSEndpoint(t *testing.T) {
	t.Parallel()
	seen := make(chan tlsSeen, 16)
	srv, ep := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- tlsSeen{target: r.RequestURI, host: r.Host, header: r.Header.Clone(), body: string(body), trailer: r.Trailer.Clone()}
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			for _, s := range []string{"one ", "two ", "three"} {
				fmt.Fprint(w, s)
				w.(http.Flusher).Flush()
			}
			w.Header().Set("X-Sum", "3")
		case "/large":
			w.Header().Set("Content-Length", fmt.Sprint(8<<20))
			_, _ = io.Copy(w, &patternReader{n: 8 << 20})
		case "/upload":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, len(body))
		default:
			w.Header()["X-Multi"] = []string{"a", "b"}
			w.Header().Set("Connection", "X-Up-Hop")
			w.Header().Set("X-Up-Hop", "1")
			w.Header().Set("Content-Length", "5")
			fmt.Fprint(w, "hello")
		}
	}))
	g := startFastGateway(t, Options{Transport: tlsTransport(srv, 0)})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", ep))
	addr := srv.Listener.Addr().String()
	rc := dialRaw(t, g)

	rc.write(rawHead("GET /a%2Fb/c?x=1&y=%20 HTTP/1.1", "Host: front.example", "X-Forwarded-For: 10.0.0.9",
		"Connection: X-Hop", "X-Hop: 1", "Keep-Alive: timeout=5", "X-Dwara-Upstream: forged"))
	resp, body := rc.readFinal(http.MethodGet)
	if resp.StatusCode != http.StatusOK || string(body) != "hello" {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	if got := resp.Header.Values("X-Multi"); strings.Join(got, ",") != "a,b" {
		t.Errorf("X-Multi %q, want both values", got)
	}
	if got := resp.Header.Get("X-Up-Hop"); got != "" {
		t.Errorf("the endpoint's hop-by-hop X-Up-Hop reached the client: %q", got)
	}
	s := recvWithin(t, seen, "GET at the endpoint")
	if s.target != "/a%2Fb/c?x=1&y=%20" || s.host != addr {
		t.Errorf("endpoint got target %q, Host %q; want the client's target and %s", s.target, s.host, addr)
	}
	rid := s.header.Get("X-Request-Id")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(rid) || resp.Header.Get("X-Request-Id") != rid {
		t.Errorf("request id %q at the endpoint, %q at the client; want one fresh id", rid, resp.Header.Get("X-Request-Id"))
	}
	for k, want := range map[string]string{
		"X-Forwarded-For": "10.0.0.9, 127.0.0.1", "X-Forwarded-Host": "front.example", "X-Forwarded-Proto": "http",
		"X-Dwara-Service": "web", "X-Dwara-Upstream": "u", "X-Dwara-Generation": "1",
		"X-Hop": "", "Keep-Alive": "", "Connection": "", "User-Agent": "",
	} {
		if got := strings.Join(s.header.Values(k), ","); got != want {
			t.Errorf("endpoint got %s %q, want %q", k, got, want)
		}
	}

	rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", "Transfer-Encoding: chunked", "Trailer: X-Check") +
		"5\r\nhello\r\n6\r\n world\r\n0\r\nX-Check: 42\r\n\r\n")
	if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusCreated || string(body) != "11" {
		t.Fatalf("POST: %d %q", resp.StatusCode, body)
	}
	s = recvWithin(t, seen, "POST at the endpoint")
	if s.body != "hello world" || s.trailer.Get("X-Check") != "42" {
		t.Errorf("endpoint got body %q, trailer %v; want the client's", s.body, s.trailer)
	}

	rc.write(rawHead("GET /chunked HTTP/1.1", "Host: x"))
	resp, body = rc.readFinal(http.MethodGet)
	if resp.StatusCode != http.StatusOK || string(body) != "one two three" || resp.Trailer.Get("X-Sum") != "3" {
		t.Fatalf("chunked: %d %q, trailer %v", resp.StatusCode, body, resp.Trailer)
	}
	recvWithin(t, seen, "chunked GET at the endpoint")

	rc.write(rawHead("HEAD /head HTTP/1.1", "Host: x"))
	if resp, body := rc.readFinal(http.MethodHead); resp.StatusCode != http.StatusOK || resp.ContentLength != 5 || len(body) != 0 {
		t.Fatalf("HEAD: %d, length %d, body %q", resp.StatusCode, resp.ContentLength, body)
	}
	recvWithin(t, seen, "HEAD at the endpoint")

	rc.write(rawHead("GET /large HTTP/1.1", "Host: x"))
	resp = rc.read(http.MethodGet)
	check := &patternChecker{}
	if _, err := io.Copy(check, resp.Body); err != nil || check.n != 8<<20 {
		t.Fatalf("large body: %d bytes, %v", check.n, err)
	}
	recvWithin(t, seen, "large GET at the endpoint")

	waitCount(t, g, "u", "200", 4)
	waitCount(t, g, "u", "201", 1)
	checkIdle(t, g, "u")
}

// TestFastHTTPSFailures: an https endpoint that refuses connections is
// answered 502 and counts for the passive checks (ejected at the third,
// not retried); one that does not answer is answered 504 at the
// transport's response-header timeout; a client's body that does not parse,
// or a field value the transport would not send, is answered 400 and is no
// failure of the endpoint's.
func TestFastHTTPSFailures(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv, ep := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/hang" {
			<-release
		}
	}))
	t.Cleanup(func() { close(release) }) // before the server's Close, which waits for the handler
	dead := "https://" + testnet.ClosedAddr(t)

	g := startFastGateway(t, Options{Transport: tlsTransport(srv, 300*time.Millisecond)})
	g.apply(t, 1, upstreamSpec("", dead, ep))
	failed := 0
	for i := 0; failed < 3; i++ {
		if i == 20 {
			t.Fatalf("only %d of 20 requests reached the closed port", failed)
		}
		if _, ej := g.counted("u"); ej != 0 {
			t.Fatalf("ejected after %d failures, want 3", failed)
		}
		if resp, _ := get(t, client, g.URL+"/", nil); resp.StatusCode == http.StatusBadGateway {
			failed++
		}
	}
	if retries, ejections := g.counted("u"); ejections != 1 || retries != 0 {
		t.Errorf("%v ejections, %v retries after 3 failures; want 1, 0", ejections, retries)
	}

	// The closed port is ejected now: every request goes to the live one.
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /hang HTTP/1.1", "Host: x"))
	if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("hung endpoint: %d %q, want 504 problem+json", resp.StatusCode, body)
	}
	checkIdle(t, g, "u")

	// Two endpoints, so that one failure could eject one (httptest's
	// servers share their certificate).
	_, ep2 := startTLSUpstream(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	bad := startFastGateway(t, Options{Transport: tlsTransport(srv, 0)})
	bad.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", ep, ep2))
	rc = dialRaw(t, bad)
	rc.write(rawHead("POST /x HTTP/1.1", "Host: x", "Transfer-Encoding: chunked") + "zz\r\nabc\r\n0\r\n\r\n")
	resp, body := rc.readFinal(http.MethodPost)
	if resp.StatusCode != http.StatusBadRequest || !resp.Close || !strings.Contains(string(body), "request body") {
		t.Fatalf("bad body: %d, close %v: %s; want 400 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	// A field value the transport would refuse to send, and count against
	// the endpoint: fasthttp refuses it first (fastStdRequest would too).
	rc = dialRaw(t, bad)
	rc.write(rawHead("GET /x HTTP/1.1", "Host: x", "X-Bad: a\x01b"))
	if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("control character in a field: %d %s; want 400", resp.StatusCode, body)
	}
	if retries, ejections := bad.counted("u"); retries != 0 || ejections != 0 {
		t.Errorf("%v retries, %v ejections after a client's bad body and field; want none", retries, ejections)
	}
	checkIdle(t, bad, "u")
}

// TestFastHTTPSUpgrade: an upgrade to an https endpoint goes through its
// transport and tunnels as one to an http endpoint does.
func TestFastHTTPSUpgrade(t *testing.T) {
	t.Parallel()
	ended := make(chan struct{}, 1)
	srv, ep := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") || !listsToken(r.Header, "Connection", "upgrade") {
			http.Error(w, "upgrade expected", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer func() { ended <- struct{}{} }()
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		_, _ = io.Copy(c, brw)
	}))
	g := startFastGateway(t, Options{Transport: tlsTransport(srv, 0)})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", ep))
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /socket HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket", "X-Request-Id: tls-tunnel"))
	resp := rc.read(http.MethodGet)
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Request-Id") != "tls-tunnel" {
		t.Fatalf("response %d, X-Request-Id %q; want 101 with the request id", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	for _, msg := range []string{"ping", strings.Repeat("x", 100_000)} {
		rc.write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(rc.br, got); err != nil || string(got) != msg {
			t.Fatalf("echo: %v", err)
		}
	}
	rc.c.Close()
	recvWithin(t, ended, "end of the tunnel at the endpoint")
	waitCount(t, g, "u", "101", 1)
	checkIdle(t, g, "u")
}

// TestFastHTTPSClientGone: a client of an https endpoint that goes away
// before the answer (noticed by looking at its connection: the
// response-header timeout is far off) or in the middle of a download is
// counted 499, is no failure of the endpoint's, and the endpoint sees its
// request cancelled.
func TestFastHTTPSClientGone(t *testing.T) {
	t.Parallel()
	cancelled := make(chan string, 8)
	arrived := make(chan string, 8)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		if r.URL.Path == "/stream" {
			chunk := []byte(strings.Repeat("x", 64<<10))
			for range 10_000 {
				if _, err := w.Write(chunk); err != nil {
					break
				}
			}
		}
		select {
		case <-r.Context().Done():
			cancelled <- r.URL.Path
		case <-time.After(conformanceDeadline):
		}
	})
	srv, ep1 := startTLSUpstream(t, handler)
	_, ep2 := startTLSUpstream(t, handler)
	g := startFastGateway(t, Options{Transport: tlsTransport(srv, 0)})
	g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", ep1, ep2))
	for i, path := range []string{"/wait", "/stream"} {
		c, err := net.Dial("tcp", hostOf(g.URL))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		if got := recvWithin(t, arrived, "request at the endpoint"); got != path {
			t.Fatalf("the endpoint got %q, want %q", got, path)
		}
		if path == "/stream" {
			if _, err := io.ReadFull(c, make([]byte, 256<<10)); err != nil {
				t.Fatalf("start of the download: %v", err)
			}
		}
		c.Close()
		if got := recvWithin(t, cancelled, "cancellation at the endpoint"); got != path {
			t.Fatalf("cancelled %q, want %q", got, path)
		}
		waitCount(t, g, "u", "499", float64(i+1))
	}
	checkIdle(t, g, "u")
	if retries, ejections := g.counted("u"); retries != 0 || ejections != 0 {
		t.Errorf("%v retries, %v ejections after clients went away; want none", retries, ejections)
	}
}

// TestFastHTTPSEarlyAnswer: an https endpoint that answers before reading
// the request body (which its transport may still be sending) gets its
// answer relayed, and the client's body is let go of before fasthttp
// reads the connection again (the race detector watches).
func TestFastHTTPSEarlyAnswer(t *testing.T) {
	t.Parallel()
	srv, ep := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "8")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		fmt.Fprint(w, "too much")
	}))
	g := startFastGateway(t, Options{Transport: tlsTransport(srv, 0)})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", ep))
	for range 5 {
		rc := dialRaw(t, g)
		const size = 8 << 20
		rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", fmt.Sprintf("Content-Length: %d", size)))
		go func() { _, _ = io.Copy(rc.c, &patternReader{n: size}) }() // ends when the connection does
		resp := rc.read(http.MethodPost)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || string(body) != "too much" {
			t.Fatalf("%d %q, want the endpoint's 413", resp.StatusCode, body)
		}
		rc.c.Close()
	}
	waitCount(t, g, "u", "413", 5)
	checkIdle(t, g, "u")
}
