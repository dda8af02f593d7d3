package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/testrun"
)

// tlsUpstream is an https endpoint: an httptest server over TLS that
// counts the handshakes it sees and keeps the last ClientHello.
type tlsUpstream struct {
	srv *httptest.Server
	// endpoint is the spec's endpoint: "https://127.0.0.1:port".
	endpoint   string
	handshakes atomic.Int64
	hello      atomic.Pointer[tls.ClientHelloInfo]
}

// startTLSUpstream serves h over TLS on a loopback listener, closed when
// the test ends. Its handshake errors (those the tests cause) are not
// logged.
func startTLSUpstream(t *testing.T, h http.Handler) *tlsUpstream {
	t.Helper()
	u := &tlsUpstream{srv: httptest.NewUnstartedServer(h)}
	u.srv.TLS = &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		u.handshakes.Add(1)
		u.hello.Store(&tls.ClientHelloInfo{ServerName: hello.ServerName,
			SupportedProtos: slices.Clone(hello.SupportedProtos), SupportedVersions: slices.Clone(hello.SupportedVersions)})
		return nil, nil // the server's own configuration
	}}
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	u.endpoint = "https://" + u.srv.Listener.Addr().String()
	return u
}

// trust is a TLS configuration that trusts u's certificate (httptest's
// servers share theirs).
func (u *tlsUpstream) trust() *tls.Config {
	return u.srv.Client().Transport.(*http.Transport).TLSClientConfig
}

// startTLSGateway starts a gateway on front whose https endpoints are
// trusted by trust (Options.UpstreamTLS), with its own metrics registry.
func startTLSGateway(t *testing.T, front string, trust *tls.Config) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg, UpstreamTLS: trust})
	t.Cleanup(p.Close)
	return &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
}

// tlsSeen is a request as the TLS upstream received it.
type tlsSeen struct {
	target, host string
	header       http.Header
	body         string
	trailer      http.Header
}

// TestUpstreamTLSExchange: requests to an https endpoint, one after the
// other on one client connection, on every front: the endpoint gets the
// target as it was sent and the header by the front's rules (the
// gateway's fields, X-Forwarded-For appended to, the client's hop-by-hop
// and X-Dwara-* fields gone); a body, chunked with a trailer or of a
// length, streams to it; the answers come back with the endpoint's fields
// but its hop-by-hop ones, the request id, a chunked answer with its
// trailer, a HEAD with its length, and a large body whole. All of it on
// one TLS connection, whose one handshake sent no server name (the
// endpoint is an IP address), offered only http/1.1 and nothing below
// TLS 1.2.
func TestUpstreamTLSExchange(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		seen := make(chan tlsSeen, 16)
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		g := startTLSGateway(t, front, up.trust())
		g.apply(t, 1, upstreamSpec("", up.endpoint))
		addr := up.srv.Listener.Addr().String()
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
			t.Fatalf("chunked POST: %d %q", resp.StatusCode, body)
		}
		s = recvWithin(t, seen, "chunked POST at the endpoint")
		if s.body != "hello world" || s.trailer.Get("X-Check") != "42" {
			t.Errorf("endpoint got body %q, trailer %v; want the client's", s.body, s.trailer)
		}

		const size = 1 << 20
		upload := strings.Repeat("0123456789abcdef", size/16)
		rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", fmt.Sprintf("Content-Length: %d", size)))
		for i := 0; i < size; i += 64 << 10 { // in pieces, as a client streams it
			rc.write(upload[i : i+64<<10])
		}
		if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusCreated || string(body) != fmt.Sprint(size) {
			t.Fatalf("POST of %d bytes: %d %q", size, resp.StatusCode, body)
		}
		if s = recvWithin(t, seen, "POST at the endpoint"); s.body != upload {
			t.Errorf("endpoint got %d bytes of the body, not the client's %d", len(s.body), size)
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
		waitCount(t, g, "u", "201", 2)
		checkIdle(t, g, "u")
		if n := up.handshakes.Load(); n != 1 {
			t.Errorf("%d TLS handshakes for 7 requests one after the other, want 1", n)
		}
		hello := up.hello.Load()
		if hello == nil {
			t.Fatal("no ClientHello seen")
		}
		if hello.ServerName != "" || !slices.Equal(hello.SupportedProtos, []string{"http/1.1"}) {
			t.Errorf("ClientHello with server name %q, ALPN %q; want none (an IP address) and http/1.1 alone", hello.ServerName, hello.SupportedProtos)
		}
		if slices.Min(hello.SupportedVersions) < tls.VersionTLS12 {
			t.Errorf("ClientHello offers versions %x; want TLS 1.2 at least", hello.SupportedVersions)
		}
	})
}

// TestUpstreamTLSUpgrade: an upgrade to an https endpoint tunnels over
// TLS on every front, bytes relayed both ways, and is counted 101 when
// the tunnel ends.
func TestUpstreamTLSUpgrade(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		ended := make(chan struct{}, 1)
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nhello from the endpoint\n")
			if brw.Flush() != nil {
				return
			}
			_, _ = io.Copy(c, brw)
		}))
		g := startTLSGateway(t, front, up.trust())
		g.apply(t, 1, upstreamSpec("", up.endpoint))
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /socket HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket", "X-Request-Id: tls-tunnel"))
		resp := rc.read(http.MethodGet)
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Request-Id") != "tls-tunnel" ||
			!strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
			t.Fatalf("response %d, Upgrade %q, X-Request-Id %q; want 101 to websocket with the request id",
				resp.StatusCode, resp.Header.Get("Upgrade"), resp.Header.Get("X-Request-Id"))
		}
		if line, err := rc.br.ReadString('\n'); err != nil || line != "hello from the endpoint\n" {
			t.Fatalf("the endpoint's first bytes: %q, %v", line, err)
		}
		checkEchoes(t, rc, "ping", strings.Repeat("x", 100_000))
		rc.c.Close()
		recvWithin(t, ended, "end of the tunnel at the endpoint")
		waitCount(t, g, "u", "101", 1)
		checkIdle(t, g, "u")
	})
}

// TestUpstreamTLSFailures, on every front: an https endpoint whose
// certificate is not trusted is answered 502 and counts for the passive
// checks (ejected at its first failure, the request retried on the other
// endpoint, which fails alike); one that does not answer is answered 504
// at the upstream's response-header timeout; a client's body that does
// not parse is answered 400 and is no failure of the endpoint's.
func TestUpstreamTLSFailures(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("untrusted certificate", func(t *testing.T) {
			t.Parallel()
			ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
			a, b := startTLSUpstream(t, ok), startTLSUpstream(t, ok)
			g := startTLSGateway(t, front, &tls.Config{RootCAs: x509.NewCertPool()})
			g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", a.endpoint, b.endpoint))
			resp, body := get(t, client, g.URL+"/", nil)
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("untrusted endpoints: %d %q, want 502 problem+json", resp.StatusCode, body)
			}
			if retries, ejections := g.counted("u"); retries != 1 || ejections != 1 {
				t.Errorf("%v retries, %v ejections after two failed handshakes; want 1 and 1 (the cap keeps the last)", retries, ejections)
			}
			if a.handshakes.Load() != 1 || b.handshakes.Load() != 1 {
				t.Errorf("handshakes begun: %d and %d, want one at each endpoint", a.handshakes.Load(), b.handshakes.Load())
			}
			checkIdle(t, g, "u")
		})
		t.Run("response-header timeout", func(t *testing.T) {
			t.Parallel()
			up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				waitRelease(nil, r.Context().Done()) // until the gateway gives up
			}))
			g := startTLSGateway(t, front, up.trust())
			g.apply(t, 1, upstreamSpec("response_header_timeout_ms: 300", up.endpoint))
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /hang HTTP/1.1", "Host: x"))
			if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("hung endpoint: %d %q, want 504 problem+json", resp.StatusCode, body)
			}
			checkIdle(t, g, "u")
		})
		t.Run("bad request body", func(t *testing.T) {
			t.Parallel()
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) })
			a, b := startTLSUpstream(t, h), startTLSUpstream(t, h)
			g := startTLSGateway(t, front, a.trust())
			g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", a.endpoint, b.endpoint))
			rc := dialRaw(t, g)
			rc.write(rawHead("POST /x HTTP/1.1", "Host: x", "Transfer-Encoding: chunked") + "zz\r\nabc\r\n0\r\n\r\n")
			if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("bad body: %d %s; want 400", resp.StatusCode, body)
			}
			if retries, ejections := g.counted("u"); retries != 0 || ejections != 0 {
				t.Errorf("%v retries, %v ejections after a client's bad body; want none", retries, ejections)
			}
			checkIdle(t, g, "u")
		})
	})
}

// TestUpstreamTLSClientGone: a client of an https endpoint that goes away
// before the answer (the response-header timeout is far off) or in the
// middle of a download is counted 499 on every front, is no failure of
// the endpoint's, and the endpoint sees its request end.
func TestUpstreamTLSClientGone(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
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
		a, b := startTLSUpstream(t, handler), startTLSUpstream(t, handler)
		g := startTLSGateway(t, front, a.trust())
		g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}, response_header_timeout_ms: 600000", a.endpoint, b.endpoint))
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
			if got := recvWithin(t, cancelled, "the end of "+path+" at the endpoint"); got != path {
				t.Fatalf("ended %q, want %q", got, path)
			}
			waitCount(t, g, "u", "499", float64(i+1))
		}
		checkIdle(t, g, "u")
		if retries, ejections := g.counted("u"); retries != 0 || ejections != 0 {
			t.Errorf("%v retries, %v ejections after clients went away; want none", retries, ejections)
		}
	})
}

// TestUpstreamTLSEarlyAnswer: an https endpoint that answers before
// reading the request body gets its answer relayed on every front.
func TestUpstreamTLSEarlyAnswer(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "8")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			fmt.Fprint(w, "too much")
		}))
		g := startTLSGateway(t, front, up.trust())
		g.apply(t, 1, upstreamSpec("", up.endpoint))
		for range 3 {
			rc := dialRaw(t, g)
			const size = 64 << 10
			rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", fmt.Sprintf("Content-Length: %d", size)) + strings.Repeat("x", size))
			resp, body := rc.readFinal(http.MethodPost)
			if resp.StatusCode != http.StatusRequestEntityTooLarge || string(body) != "too much" {
				t.Fatalf("%d %q, want the endpoint's 413", resp.StatusCode, body)
			}
			rc.c.Close()
		}
		waitCount(t, g, "u", "413", 3)
		checkIdle(t, g, "u")
	})
}

// TestUpstreamTLSIdleRecords: an https endpoint that closes an idle
// connection sends a close_notify record first. The pool finds bytes on
// the idle socket and does not reuse it, but does not count them as an
// unsolicited answer: the next request is served on a new connection.
func TestUpstreamTLSIdleRecords(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
		g := startTLSGateway(t, front, up.trust())
		g.apply(t, 1, upstreamSpec("", up.endpoint))
		for i := range 2 {
			if resp, body := get(t, client, g.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "ok" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
			// Closed with a close_notify on each side's socket before
			// CloseClientConnections returns (loopback delivers at once).
			up.srv.CloseClientConnections()
		}
		if n := up.handshakes.Load(); n != 2 {
			t.Errorf("%d handshakes, want 2: the closed connection is not to be reused", n)
		}
		if n := testutil.ToFloat64(g.um.protocol.WithLabelValues("u", "unsolicited")); n != 0 {
			t.Errorf("%v unsolicited answers counted for a close_notify", n)
		}
	})
}

// TestUpstreamTLSMirror: the copies of a mirrored service go to an https
// mirror endpoint over its pool, on every front.
func TestUpstreamTLSMirror(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		copies := make(chan tlsSeen, 4)
		shadow := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			offerSeen(copies, tlsSeen{target: r.RequestURI, header: r.Header.Clone(), body: string(body)})
			fmt.Fprint(w, "dropped")
		}))
		real := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "real %s", body)
		}))
		g := startTLSGateway(t, front, shadow.trust())
		g.apply(t, 1, mirrorSpec(real.Listener.Addr().String(), shadow.endpoint, 100, ""))
		resp, err := client.Post(g.URL+"/copy", "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "real payload" {
			t.Fatalf("real answer %d %q", resp.StatusCode, body)
		}
		c := recvWithin(t, copies, "copy at the https mirror")
		if c.target != "/copy" || c.body != "payload" || c.header.Get("X-Dwara-Mirror") != "1" || c.header.Get("X-Dwara-Upstream") != "shadow" {
			t.Errorf("copy %q %q, X-Dwara-Mirror %q, X-Dwara-Upstream %q; want the request's target and body, 1, shadow",
				c.target, c.body, c.header.Get("X-Dwara-Mirror"), c.header.Get("X-Dwara-Upstream"))
		}
		deadline := time.Now().Add(testrun.Timeout)
		for mirrorCount(g, mirrorSent) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("copy not counted sent; failed %v, timeout %v", mirrorCount(g, mirrorFailed), mirrorCount(g, mirrorTimeout))
			}
			time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
		}
	})
}

// TestUpstreamTLSSlowAnswer: an answer that comes after the fasthttp
// fronts have cut the wait for it in several slices (looking at the
// client between two) is read whole from the TLS connection: a read
// deadline that passes between two records leaves the session usable.
func TestUpstreamTLSSlowAnswer(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A slow endpoint, not synchronisation: the answer comes after
			// two slices of FastClientCheckInterval.
			time.Sleep(3 * FastClientCheckInterval)
			fmt.Fprint(w, "late")
		}))
		g := startTLSGateway(t, front, up.trust())
		g.apply(t, 1, upstreamSpec("", up.endpoint))
		for i := range 2 {
			if resp, body := get(t, client, g.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "late" {
				t.Fatalf("request %d: %d %q, want the late answer", i, resp.StatusCode, body)
			}
		}
		if n := up.handshakes.Load(); n != 1 {
			t.Errorf("%d handshakes, want 1: the connection stays usable", n)
		}
	})
}

// TestUpstreamTLSServerName: an https endpoint named by its host name is
// sent that name as the TLS server name (SNI).
func TestUpstreamTLSServerName(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
		_, port, _ := net.SplitHostPort(up.srv.Listener.Addr().String())
		// httptest's certificate names example.com and the loopback
		// addresses, not localhost: the name is what this test looks at.
		g := startTLSGateway(t, front, &tls.Config{InsecureSkipVerify: true})
		g.apply(t, 1, upstreamSpec("", "https://localhost:"+port))
		if resp, body := get(t, client, g.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		if hello := up.hello.Load(); hello == nil || hello.ServerName != "localhost" {
			t.Errorf("ClientHello %+v; want the server name localhost", hello)
		}
	})
}
