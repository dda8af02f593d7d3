package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/testrun"
)

// streamingHandler answers /stream with a body that keeps coming until the
// request is abandoned, an upgrade request with 101 and then silence until
// the tunnel closes, and anything else at once, counting those in short.
func streamingHandler(short *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Upgrade") != "":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			brw.Flush()
			_, _ = brw.ReadByte() // until the tunnel closes
		case r.URL.Path == "/stream":
			rc := http.NewResponseController(w)
			chunk := []byte(strings.Repeat("x", 64<<10))
			for i := 0; i < 10_000; i++ { // 640 MB at most: ends long before
				if _, err := w.Write(chunk); err != nil {
					return
				}
				if rc.Flush() != nil {
					return
				}
			}
		default:
			short.Add(1)
			fmt.Fprint(w, "short")
		}
	})
}

// TestAbortedAnswersLeaveStateBalanced: clients that give up in the middle
// of a download (or of an upgraded tunnel) leave every endpoint's in-flight
// count at 0, are counted as 499, and least_conn and peak_ewma keep sharing
// the later requests between the endpoints.
func TestAbortedAnswersLeaveStateBalanced(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, balancer := range []string{"least_conn", "peak_ewma"} {
			for _, kind := range []string{"download", "upgrade"} {
				t.Run(balancer+"/"+kind, func(t *testing.T) {
					t.Parallel()
					var shortA, shortB atomic.Int64
					a := startUpstream(t, streamingHandler(&shortA))
					b := startUpstream(t, streamingHandler(&shortB))
					g := startGateway(t, front)
					g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, balancer: %s, endpoints: [%q, %q]}]\nservices: [{name: web, upstream: u}]\n",
						balancer, a.Listener.Addr().String(), b.Listener.Addr().String()))
					const aborted = 4
					for range aborted {
						abandon(t, g, kind)
					}
					// The handlers notice the client is gone and end on their own;
					// their bookkeeping is the signal: an abandoned download is
					// counted as 499, a closed tunnel as the 101 it was.
					code := "499"
					if kind == "upgrade" {
						code = "101"
					}
					gone := g.table.Load().upstreams["u"]
					deadline := time.Now().Add(testrun.Timeout)
					for testutil.ToFloat64(g.m.requests.WithLabelValues("web", "u", code)) < aborted {
						if time.Now().After(deadline) {
							t.Fatalf("%v requests counted as %s, want %d; counts: %v", testutil.ToFloat64(g.m.requests.WithLabelValues("web", "u", code)), code, aborted, g.samples(t, "dwara_requests_total"))
						}
						time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
					}
					for _, ep := range gone.endpoints {
						if n := ep.state.Inflight(); n != 0 {
							t.Errorf("endpoint %s: %d in flight after the aborted requests, want 0", ep.Addr, n)
						}
					}
					for range 40 {
						resp, body := get(t, client, g.URL+"/short", nil)
						if resp.StatusCode != http.StatusOK || body != "short" {
							t.Fatalf("after the aborts: %d %q", resp.StatusCode, body)
						}
					}
					// least_conn shares requests at rest between tied endpoints;
					// a leaked in-flight count would send all of them to one.
					if balancer == "least_conn" && (shortA.Load() < 10 || shortB.Load() < 10) {
						t.Errorf("least_conn sent %d and %d of 40 requests at rest, want both at least 10", shortA.Load(), shortB.Load())
					}
				})
			}
		}
	})
}

// abandon starts a download (or an upgrade) through g, reads the start of
// the answer, and hangs up.
func abandon(t *testing.T, g *gateway, kind string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testrun.Timeout))
	req := "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"
	if kind == "upgrade" {
		req = "GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"
	}
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	want := http.StatusOK
	if kind == "upgrade" {
		want = http.StatusSwitchingProtocols
	}
	if resp.StatusCode != want {
		t.Fatalf("%s: status %d, want %d", kind, resp.StatusCode, want)
	}
	if kind == "download" {
		buf := make([]byte, 256<<10)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatalf("read the start of the download: %v", err)
		}
	}
}

// TestStickyCookieBesideUpstreamCookies: on a session's first answer the
// client gets the gateway's affinity cookie and the endpoint's own cookies,
// the endpoint's never replacing the gateway's.
func TestStickyCookieBesideUpstreamCookies(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.SetCookie(w, &http.Cookie{Name: "app", Value: "1"})
			http.SetCookie(w, &http.Cookie{Name: "app2", Value: "2"})
			fmt.Fprint(w, "ok")
		}))
		g := startGateway(t, front)
		g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a, sticky: {cookie: sid}}]\n", up.Listener.Addr().String()))
		resp, _ := get(t, client, g.URL+"/", nil)
		var names []string
		for _, c := range resp.Cookies() {
			names = append(names, c.Name)
		}
		if strings.Join(names, ",") != "sid,app,app2" {
			t.Errorf("cookies %v, want sid, then app and app2", names)
		}
	})
}
