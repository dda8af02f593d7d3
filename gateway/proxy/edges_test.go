package proxy

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/gateway/config"
)

// TestRefusedRequests sends what the gateway must never forward, each on a
// connection of its own, and checks the answer and that nothing reached
// the endpoint.
func TestRefusedRequests(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		var reached atomic.Int64
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
		}))
		g := startGateway(t, front)
		g.apply(t, 1, "upstreams: [{name: a, endpoints: ["+`"`+hostOf(up.URL)+`"`+"]}]\nservices: [{name: v1, base_path: /v1, upstream: a}]\n")
		for _, c := range []struct {
			name, head string
			status     int
		}{
			{"connect", rawHead("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443"), http.StatusMethodNotAllowed},
			{"trace", rawHead("TRACE /v1/x HTTP/1.1", "Host: x", "Cookie: secret=1"), http.StatusMethodNotAllowed},
			{"h2c preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", http.StatusNotImplemented},
			{"pri", rawHead("PRI /v1/x HTTP/1.1", "Host: x"), http.StatusNotImplemented},
			{"dot dot", rawHead("GET /v1/../admin HTTP/1.1", "Host: x"), http.StatusBadRequest},
			{"encoded dot dot", rawHead("GET /v1/%2e%2e/admin HTTP/1.1", "Host: x"), http.StatusBadRequest},
			{"encoded slashes", rawHead("GET /v1%2f..%2fadmin HTTP/1.1", "Host: x"), http.StatusBadRequest},
			{"dot", rawHead("GET /v1/./x HTTP/1.1", "Host: x"), http.StatusBadRequest},
			{"trailing dot dot", rawHead("GET /v1/x/.. HTTP/1.1", "Host: x"), http.StatusBadRequest},
		} {
			t.Run(c.name, func(t *testing.T) {
				rc := dialRaw(t, g)
				rc.write(c.head)
				resp, body := rc.readFinal("GET")
				if resp.StatusCode != c.status {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.status, body)
				}
				var p struct{ Title, Detail string }
				if err := json.Unmarshal(body, &p); err != nil || p.Detail == "" {
					t.Errorf("body %q: want problem+json with a detail (%v)", body, err)
				}
				if c.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") == "" {
					t.Error("405 without Allow")
				}
			})
		}
		if n := reached.Load(); n != 0 {
			t.Fatalf("%d refused requests reached the endpoint", n)
		}
		// Names that only look like dot segments are paths like any other.
		for _, path := range []string{"/v1/.well-known/x", "/v1/..x", "/v1/x..", "/v1/a.b"} {
			resp, _ := get(t, client, g.URL+path, nil)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: status %d, want 200", path, resp.StatusCode)
			}
		}
		if n := reached.Load(); n != 4 {
			t.Fatalf("%d requests reached the endpoint, want the 4 ordinary paths", n)
		}
	})
}

// TestMalformedChunkedBodyIs400: a request body whose chunk size does not
// parse is the client's fault: 400 with the connection closed, and no
// failure of the endpoint for the passive checks.
func TestMalformedChunkedBodyIs400(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		g := proxyTo(t, front, 1, hostOf(up.URL), "passive: {consecutive_failures: 1}")
		rc := dialRaw(t, g)
		rc.write(rawHead("POST /x HTTP/1.1", "Host: x", "Transfer-Encoding: chunked") + "zz\r\nabc\r\n0\r\n\r\n")
		resp, body := rc.readFinal("POST")
		if resp.StatusCode != http.StatusBadRequest || !resp.Close {
			t.Fatalf("status %d, close %v: %s; want 400 and the connection closed", resp.StatusCode, resp.Close, body)
		}
		if !strings.Contains(string(body), "request body") {
			t.Errorf("body %q does not say what was wrong", body)
		}
		if n := testutil.ToFloat64(g.um.ejections.WithLabelValues("a")); n != 0 {
			t.Errorf("%v ejections after a client's bad body, want 0", n)
		}
		if resp, _ := get(t, client, g.URL+"/x", nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("after the bad body: status %d, want 200", resp.StatusCode)
		}
	})
}

// TestAbsoluteFormRoutesOnItsAuthority: a request whose target is an
// absolute URI is routed by that URI's authority (RFC 9112 section 3.2.2:
// the Host field is then ignored), and the endpoint sees that authority as
// X-Forwarded-Host: one authority for routing and forwarding.
func TestAbsoluteFormRoutesOnItsAuthority(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Seen-Host", r.Header.Get("X-Forwarded-Host"))
			w.Header().Set("X-Seen-Service", r.Header.Get("X-Dwara-Service"))
		}))
		g := startGateway(t, front)
		g.apply(t, 1, "upstreams: [{name: a, endpoints: [\""+hostOf(up.URL)+"\"]}]\n"+
			"services: [{name: inside, host: a.example, upstream: a}, {name: outside, base_path: /, upstream: a}]\n")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET http://a.example/x HTTP/1.1", "Host: b.example"))
		resp, body := rc.readFinal("GET")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if s, h := resp.Header.Get("X-Seen-Service"), resp.Header.Get("X-Seen-Host"); s != "inside" || h != "a.example" {
			t.Fatalf("routed to %q with X-Forwarded-Host %q; want inside and a.example", s, h)
		}
	})
}

// TestUnspecifiedEndpointNotDialled: an endpoint written as 0.0.0.0:port
// would reach this host's own listeners on that port (Linux dials
// 0.0.0.0 as loopback). Validation refuses it; a spec that skipped
// validation is refused again when the proxy dials: 502, and the listener
// sees nothing.
func TestUnspecifiedEndpointNotDialled(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		var reached atomic.Int64
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
		_, port, _ := strings.Cut(hostOf(up.URL), ":")
		g := startGateway(t, front)
		// Not through apply, which parses and validates: straight to Apply.
		spec := &config.Spec{
			Upstreams: []config.Upstream{{Name: "a", Endpoints: []string{"0.0.0.0:" + port}, AllowLinkLocal: true}},
			Services:  []config.Service{{Name: "web", BasePath: "/", Upstream: "a"}},
		}
		if err := g.Apply(spec, 1); err != nil {
			t.Fatal(err)
		}
		if resp, _ := get(t, client, g.URL+"/", nil); resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", resp.StatusCode)
		}
		if n := reached.Load(); n != 0 {
			t.Fatalf("the listener behind 0.0.0.0 got %d requests", n)
		}
	})
}

// stallGateway is a gateway on front with a short client stall timeout.
func stallGateway(t *testing.T, front string, stall time.Duration, addr string) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg, ClientStallTimeout: stall})
	g := &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
	g.apply(t, 1, "upstreams: [{name: a, endpoints: [\""+addr+"\"]}]\nservices: [{name: web, upstream: a}]\n")
	return g
}

// TestClientStallTimeout: a client that takes nothing of a large answer
// for the stall timeout is cut and counted 499; one that stops sending its
// request body is answered 408; a slow stream that keeps moving for longer
// than the stall timeout in all is never cut.
func TestClientStallTimeout(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		// The stall timeout is long beside the slow stream's gaps (an eighth
		// of it), so a busy machine cannot stretch a gap into a stall.
		const stall = time.Second
		const ticks = 16 // twice the stall timeout in all
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/big":
				chunk := make([]byte, 64<<10)
				for range 1024 { // 64 MiB, far beyond the socket buffers
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			case "/slow":
				for i := range ticks {
					fmt.Fprintf(w, "tick %d\n", i)
					w.(http.Flusher).Flush()
					select {
					case <-time.After(stall / 8):
					case <-r.Context().Done():
						return
					}
				}
			case "/late":
				// The head at once, the body only after twice the stall
				// timeout: the wait is the endpoint's, not the client's.
				w.Header().Set("Content-Length", "4")
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-time.After(2 * stall):
				case <-r.Context().Done():
					return
				}
				_, _ = io.WriteString(w, "late")
			case "/upload":
				_, _ = io.Copy(io.Discard, r.Body)
			}
		}))
		g := stallGateway(t, front, stall, hostOf(up.URL))

		t.Run("reader", func(t *testing.T) {
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /big HTTP/1.1", "Host: x"))
			deadline := time.Now().Add(conformanceDeadline)
			for testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "499")) < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("a client reading nothing was not cut: %v", g.samples(t, "dwara_requests_total"))
				}
				time.Sleep(20 * time.Millisecond) // polling a condition, bounded above
			}
		})
		t.Run("body", func(t *testing.T) {
			rc := dialRaw(t, g)
			// More than the fasthttp front reads before its handler (8 KiB),
			// so the stall falls where the proxy reads the body.
			rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", "Content-Length: 100000") + strings.Repeat("0123456789", 2000))
			resp, body := rc.readFinal("POST")
			if resp.StatusCode != http.StatusRequestTimeout || !resp.Close || !strings.Contains(string(body), "stopped arriving") {
				t.Fatalf("stalled upload: status %d, close %v: %s; want 408 and the connection closed", resp.StatusCode, resp.Close, body)
			}
		})
		t.Run("slow body", func(t *testing.T) {
			// A body large enough to go by splice on the fasthttp front,
			// sent in pieces for twice the stall timeout in all: it keeps
			// moving, so it is never cut.
			const n, pieces = 200_000, ticks
			rc := dialRaw(t, g)
			go func() {
				rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", "Content-Length: "+strconv.Itoa(n)))
				for i := range pieces {
					time.Sleep(stall / 8)
					_, _ = io.Copy(rc.c, &patternReader{n: int64((i + 1) * n / pieces), off: int64(i * n / pieces)})
				}
			}()
			if resp, body := rc.readFinal("POST"); resp.StatusCode != http.StatusOK {
				t.Fatalf("a slow upload that keeps moving: status %d: %s; want 200", resp.StatusCode, body)
			}
		})
		t.Run("late body", func(t *testing.T) {
			resp, body := get(t, client, g.URL+"/late", nil)
			if resp.StatusCode != http.StatusOK || body != "late" {
				t.Fatalf("a body the endpoint sent late: %d %q; want 200 \"late\"", resp.StatusCode, body)
			}
		})
		t.Run("slow stream", func(t *testing.T) {
			resp, body := get(t, client, g.URL+"/slow", nil)
			if resp.StatusCode != http.StatusOK || strings.Count(body, "tick") != ticks {
				t.Fatalf("slow stream: %d %q; want all %d ticks", resp.StatusCode, body, ticks)
			}
			// The connection is reused for the next request without a stale
			// deadline cutting it.
			time.Sleep(2 * stall) // longer than the stall timeout, so an old deadline would have passed
			if resp, _ := get(t, client, g.URL+"/upload", nil); resp.StatusCode != http.StatusOK {
				t.Fatalf("next request: %d", resp.StatusCode)
			}
		})
	})
}
