package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// closingUpstream accepts connections, reads one request with its body and
// closes the connection without answering: the request reached it, and no
// answer came.
type closingUpstream struct {
	addr string
	seen atomic.Int64 // requests read
}

func startClosingUpstream(t *testing.T) *closingUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &closingUpstream{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				u.seen.Add(1)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return u
}

// startEcho starts an endpoint that answers 200 with the request body and
// counts the requests in served.
func startEcho(t *testing.T, served *atomic.Int64) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.Copy(w, r.Body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// send sends one request with body (none when "") and returns the status
// and the answer's body.
func send(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRetryRules: a request that cannot have reached the endpoint is
// retried on the other endpoint whatever its method (with its body); one
// that may have reached it (written and no answer, or a response-header
// timeout) is retried only when it is a GET without a body. The first
// request of a round-robin upstream goes to its first endpoint.
func TestRetryRules(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		const payload = "an order that must not be placed twice"
		for _, tc := range []struct {
			name         string
			first        func(t *testing.T) (addr string, reached func() int64)
			extra        string
			method, body string
			wantStatus   int
			wantRetries  float64
		}{
			{name: "GET that reached a closing endpoint", first: closing, method: "GET",
				wantStatus: 200, wantRetries: 1},
			{name: "POST that reached a closing endpoint", first: closing, method: "POST", body: payload,
				wantStatus: 502},
			{name: "POST refused at connect", first: refused, method: "POST", body: payload,
				wantStatus: 200, wantRetries: 1},
			{name: "DELETE refused at connect", first: refused, method: "DELETE",
				wantStatus: 200, wantRetries: 1},
			{name: "DELETE that reached a closing endpoint", first: closing, method: "DELETE",
				wantStatus: 502},
			{name: "GET after a response-header timeout", first: hung, extra: "response_header_timeout_ms: 300", method: "GET",
				wantStatus: 200, wantRetries: 1},
			{name: "POST after a response-header timeout", first: hung, extra: "response_header_timeout_ms: 300", method: "POST", body: payload,
				wantStatus: 504},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				addr, reached := tc.first(t)
				var served atomic.Int64
				good := startEcho(t, &served)
				g := startGateway(t, front)
				g.apply(t, 1, upstreamSpec(tc.extra, addr, good))
				status, body := send(t, tc.method, g.URL+"/", tc.body)
				if status != tc.wantStatus {
					t.Fatalf("%s: %d %q, want %d", tc.method, status, body, tc.wantStatus)
				}
				if n := reached(); n != 1 && n >= 0 {
					t.Errorf("the first endpoint read %d requests, want 1", n)
				}
				wantServed := int64(tc.wantRetries)
				if got := served.Load(); got != wantServed {
					t.Errorf("the second endpoint served %d requests, want %d", got, wantServed)
				}
				if status == 200 && body != tc.body {
					t.Errorf("the retried request arrived with body %q, want %q", body, tc.body)
				}
				if retries, _ := g.counted("u"); retries != tc.wantRetries {
					t.Errorf("dwara_upstream_retries_total = %v, want %v", retries, tc.wantRetries)
				}
			})
		}
	})
}

func closing(t *testing.T) (string, func() int64) {
	u := startClosingUpstream(t)
	return u.addr, u.seen.Load
}

func refused(t *testing.T) (string, func() int64) {
	return testnet.ClosedAddr(t), func() int64 { return -1 }
}

func hung(t *testing.T) (string, func() int64) {
	u := startHungUpstream(t)
	return u.addr, func() int64 {
		recvWithin(t, u.requests, "the request at the hung endpoint")
		return 1
	}
}

// heldUpstream answers each request only when released, and reports each
// arrival first: requests pile up in flight on it as the test decides.
type heldUpstream struct {
	addr    string
	arrived chan struct{}
	release func()
}

func startHeldUpstream(t *testing.T) *heldUpstream {
	t.Helper()
	u := &heldUpstream{arrived: make(chan struct{}, 64)}
	released := make(chan struct{})
	u.release = sync.OnceFunc(func() { close(released) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		offerSeen(u.arrived, struct{}{})
		select {
		case <-released:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "held")
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(u.release) // runs first: the server's Close waits for its handlers
	u.addr = strings.TrimPrefix(srv.URL, "http://")
	return u
}

// TestRetryBudget holds retried requests in flight on one endpoint while
// the other refuses connections: with fewer than 5×minRetryConcurrency
// requests in flight the budget is minRetryConcurrency retries, so once that many retries are in
// flight the next failure is answered 502 instead of being retried; when
// they end, retries are allowed again.
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		held := startHeldUpstream(t)
		dead := testnet.ClosedAddr(t)
		g := startGateway(t, front)
		// least_conn sends every new request to the refusing endpoint once the
		// other has requests in flight; a high threshold keeps it in rotation.
		g.apply(t, 1, upstreamSpec("balancer: least_conn, passive: {consecutive_failures: 100}", dead, held.addr))

		results := make(chan int, 32)
		start := func() {
			go func() {
				status, _ := send(t, "GET", g.URL+"/", "")
				results <- status
			}()
		}
		inFlight := 0
		for retries := 0.0; retries < minRetryConcurrency; retries, _ = g.counted("u") {
			if inFlight == 2*minRetryConcurrency {
				t.Fatalf("%d requests in flight and only %v retries", inFlight, retries)
			}
			start()
			testrun.Recv(t, held.arrived, "a request at the held endpoint")
			inFlight++
		}
		// The budget is spent: this one fails on the refusing endpoint and is
		// not retried.
		start()
		if status := testrun.Recv(t, results, "the answer beyond the budget"); status != http.StatusBadGateway {
			t.Fatalf("request beyond the retry budget: %d, want 502", status)
		}
		if retries, _ := g.counted("u"); retries != minRetryConcurrency {
			t.Errorf("dwara_upstream_retries_total = %v, want %d", retries, minRetryConcurrency)
		}
		held.release()
		for range inFlight {
			if status := testrun.Recv(t, results, "a held request's answer"); status != 200 {
				t.Errorf("held request: %d, want 200", status)
			}
		}
		// The retries ended with their requests: the budget is back. With
		// nothing in flight least_conn rotates over its ties, so one of two
		// requests meets the refusing endpoint.
		for range 2 {
			start()
			if status := testrun.Recv(t, results, "an answer after the budget came back"); status != 200 {
				t.Errorf("request after the held ones ended: %d, want 200", status)
			}
		}
		if retries, _ := g.counted("u"); retries != minRetryConcurrency+1 {
			t.Errorf("dwara_upstream_retries_total = %v, want %d", retries, minRetryConcurrency+1)
		}
	})
}

// TestKillOneOfTwoUnderLoad kills one of an upstream's two endpoints while
// 8 clients send GETs through the gateway: no GET fails (the requests that
// meet the dead endpoint are retried on the live one), and the passive
// checks eject the dead endpoint.
func TestKillOneOfTwoUnderLoad(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		live := startPool(t, "live", 1)
		doomed := startPool(t, "doomed", 1)
		g := startGateway(t, front)
		g.apply(t, 1, upstreamSpec("", live.Addrs[0], doomed.Addrs[0]))

		const clients, perClient, killAfter = 8, 250, 400
		var done atomic.Int64
		kill := make(chan struct{})
		killOnce := sync.OnceFunc(func() { close(kill) })
		killed := make(chan struct{})
		go func() {
			<-kill
			doomed.Close()
			close(killed)
		}()
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			failures []string
		)
		for c := range clients {
			wg.Go(func() {
				for i := range perClient {
					resp, err := client.Get(fmt.Sprintf("%s/c%d/%d", g.URL, c, i))
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					if err != nil || resp.StatusCode != 200 {
						mu.Lock()
						if err != nil {
							failures = append(failures, err.Error())
						} else {
							failures = append(failures, resp.Status)
						}
						mu.Unlock()
					}
					if done.Add(1) == killAfter {
						killOnce()
					}
				}
			})
		}
		wg.Wait()
		killOnce()
		testrun.Recv(t, killed, "the endpoint's death")
		if len(failures) > 0 {
			t.Errorf("%d of %d GETs failed, want 0; first: %s", len(failures), clients*perClient, failures[0])
		}
		retries, ejections := g.counted("u")
		if ejections < 1 || retries < 1 {
			t.Errorf("%v ejections and %v retries, want the dead endpoint retried around and ejected", ejections, retries)
		}
		t.Logf("%v retries, %v ejections; the live endpoint served %d, the doomed one %d",
			retries, ejections, live.Hits(0), doomed.Hits(0))
	})
}
