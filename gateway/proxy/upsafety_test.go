package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// The endpoint side of the forwarding path: a connection to an endpoint is
// reused only when it is provably clean, requests that may have reached
// an endpoint are not sent twice unless they are safe, and endpoint
// answers are read as RFC 9112 frames them. The endpoints here are raw:
// they answer with bytes the test chooses, framing mistakes included.

// poison is a whole answer that no request asked for. An endpoint that
// sends it after an answer, or on an idle connection, must never have it
// taken for the answer to a later request.
const poison = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON"

// rawEndpoint is an endpoint that reads requests with the standard
// library's parser and answers each with the bytes answer returns for it.
// It counts the requests it read by method and path.
type rawEndpoint struct {
	addr string
	mu   sync.Mutex
	seen map[string]int // "METHOD /path" -> requests read
}

// rawAnswer is what a rawEndpoint does with one request: write bytes, then
// (when closeAfter) close the connection after the delay, or (when late is
// not empty) write late on the connection after the answer, and report on
// lateSent once it is written.
type rawAnswer struct {
	bytes      string
	closeAfter bool
	delay      time.Duration
	late       string
	lateSent   chan<- struct{}
	// proceed, when set, is waited on before late is written.
	proceed <-chan struct{}
	// closed, when set, is told once the connection is closed (closeAfter).
	closed chan<- struct{}
}

// startRawEndpoint serves answer on a loopback listener until the test
// ends. answer gets the request and its number on its connection (0 for
// the first).
func startRawEndpoint(t testing.TB, answer func(r *http.Request, nth int) rawAnswer) *rawEndpoint {
	t.Helper()
	return startRawEndpointIdle(t, 0, answer)
}

// startRawEndpointIdle is startRawEndpoint whose connections are closed
// when no request comes for idle after an answer (0: they wait as long
// as the test).
func startRawEndpointIdle(t testing.TB, idle time.Duration, answer func(r *http.Request, nth int) rawAnswer) *rawEndpoint {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &rawEndpoint{addr: ln.Addr().String(), seen: map[string]int{}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer func() {
					c.Close()
					mu.Lock()
					delete(conns, c)
					mu.Unlock()
				}()
				_ = c.SetDeadline(time.Now().Add(2 * conformanceDeadline))
				br := bufio.NewReader(c)
				for nth := 0; ; nth++ {
					if idle > 0 && nth > 0 {
						_ = c.SetReadDeadline(time.Now().Add(idle))
					}
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, r.Body)
					e.mu.Lock()
					e.seen[r.Method+" "+r.URL.Path]++
					e.mu.Unlock()
					a := answer(r, nth)
					if a.delay > 0 {
						time.Sleep(a.delay)
					}
					if _, err := io.WriteString(c, a.bytes); err != nil {
						return
					}
					if a.late != "" {
						if a.proceed != nil {
							select {
							case <-a.proceed:
							case <-time.After(conformanceDeadline):
								return
							}
						}
						if _, err := io.WriteString(c, a.late); err != nil {
							return
						}
						if a.lateSent != nil {
							a.lateSent <- struct{}{}
						}
					}
					if a.closeAfter {
						c.Close()
						if a.closed != nil {
							a.closed <- struct{}{}
						}
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// count is how many requests of method to path the endpoint read.
func (e *rawEndpoint) count(method, path string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.seen[method+" "+path]
}

// okAnswer is a clean answer whose body names the request's path.
func okAnswer(r *http.Request) string {
	body := "ok:" + r.URL.Path
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// poisoned is how the endpoint of TestNoAnswerCrossesExchanges answers a
// request to /v/VARIANT/ID: each variant but clean leaves poison where a
// careless pool would take it for the next answer.
func poisoned(r *http.Request) string {
	parts := strings.Split(r.URL.Path, "/")
	if len(parts) < 3 {
		return "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"
	}
	body := "ok:" + r.URL.Path
	switch parts[2] {
	case "extra": // a second answer in the same write
		return okAnswer(r) + poison
	case "head": // a HEAD answered with the body it announces
		return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(poison)) + "\r\n\r\n" + poison
	case "204":
		return "HTTP/1.1 204 No Content\r\n\r\n" + poison
	case "304":
		return "HTTP/1.1 304 Not Modified\r\n\r\n" + poison
	case "chunked": // bytes after the last chunk and its trailer
		return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\nX-T: 1\r\n\r\n" + poison
	}
	return okAnswer(r)
}

// protocolErrors is the value of dwara_upstream_protocol_errors_total for
// upstream and reason.
func (g *gateway) protocolErrors(t *testing.T, upstream, reason string) float64 {
	t.Helper()
	for _, s := range g.samples(t, "dwara_upstream_protocol_errors_total") {
		if s.labels["upstream"] == upstream && s.labels["reason"] == reason {
			return s.value
		}
	}
	return 0
}

// TestNoAnswerCrossesExchanges sends 10,000 requests from 16 clients to an
// endpoint that leaves a stray answer after its answer in every way HTTP
// framing allows (a second answer in the same write, a HEAD or 204 or 304
// with a body, bytes after the last chunk), chosen at random per request:
// every client gets the answer to its own request, never the stray one,
// and each way is counted.
func TestNoAnswerCrossesExchanges(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		ep := startRawEndpoint(t, func(r *http.Request, _ int) rawAnswer { return rawAnswer{bytes: poisoned(r)} })
		g := proxyTo(t, front, 1, ep.addr, "")
		variants := []string{"clean", "extra", "head", "204", "304", "chunked"}
		const clients, perClient = 16, 625
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		tr := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		var wrong atomic.Int64
		var firstWrong atomic.Value
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(20, uint64(i)))
				for n := range perClient {
					if ctx.Err() != nil {
						return
					}
					v := variants[rng.IntN(len(variants))]
					path := fmt.Sprintf("/v/%s/%d-%d", v, i, n)
					method := http.MethodGet
					if v == "head" {
						method = http.MethodHead
					}
					req, _ := http.NewRequestWithContext(ctx, method, g.URL+path, nil)
					resp, err := client.Do(req)
					if err != nil {
						if wrong.Add(1) == 1 {
							firstWrong.Store(fmt.Sprintf("%s %s: %v", method, path, err))
						}
						continue
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want, wantCode := "ok:"+path, http.StatusOK
					switch v {
					case "head", "204", "304":
						want = ""
					}
					switch v {
					case "204":
						wantCode = http.StatusNoContent
					case "304":
						wantCode = http.StatusNotModified
					}
					if resp.StatusCode != wantCode || string(body) != want {
						if wrong.Add(1) == 1 {
							firstWrong.Store(fmt.Sprintf("%s %s: got %d %q, want %d %q", method, path, resp.StatusCode, body, wantCode, want))
						}
					}
				}
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			t.Fatalf("the requests did not finish within the test's deadline")
		}
		if n := wrong.Load(); n > 0 {
			t.Fatalf("%d of %d requests got another exchange's bytes or failed; first: %v", n, clients*perClient, firstWrong.Load())
		}
		if n := g.protocolErrors(t, "a", "extra_bytes"); n == 0 {
			t.Errorf("dwara_upstream_protocol_errors_total{reason=extra_bytes} = 0, want the stray answers counted")
		}
	})
}

// TestStrayBytesOnIdleConnection: an endpoint that writes a whole answer
// on a connection while it is idle (after the answer, unasked) has that
// connection closed, not reused: the next request gets its own answer, and
// the stray bytes are counted.
func TestStrayBytesOnIdleConnection(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		lateSent, proceed := make(chan struct{}, 1), make(chan struct{})
		ep := startRawEndpoint(t, func(r *http.Request, nth int) rawAnswer {
			a := rawAnswer{bytes: okAnswer(r)}
			if r.URL.Path == "/first" {
				a.late, a.lateSent, a.proceed = poison, lateSent, proceed
			}
			return a
		})
		g := proxyTo(t, front, 1, ep.addr, "")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /first HTTP/1.1", "Host: a.example"))
		if resp, body := rc.readFinal("GET"); resp.StatusCode != 200 || string(body) != "ok:/first" {
			t.Fatalf("first: %d %q", resp.StatusCode, body)
		}
		// The stray answer comes once the client has its answer: the
		// connection is idle by then.
		close(proceed)
		recvWithin(t, lateSent, "stray answer written")
		testrun.Eventually(t, "the stray bytes counted", func() bool {
			// The pools look at an idle connection when they take it.
			rc.write(rawHead("GET /second HTTP/1.1", "Host: a.example"))
			resp, body := rc.readFinal("GET")
			if resp.StatusCode != 200 || string(body) != "ok:/second" {
				t.Fatalf("second: %d %q, want its own answer", resp.StatusCode, body)
			}
			return g.protocolErrors(t, "a", "unsolicited") == 1
		})
	})
}

// TestUnsafeRequestNotSentTwice: an endpoint that reads a request on a
// reused connection and closes it without an answer (at once, or 200 ms
// later) may have acted on it; a POST, PATCH or DELETE without a body is
// then answered 502 and was delivered exactly once, while a GET is sent
// again.
func TestUnsafeRequestNotSentTwice(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, delay := range []time.Duration{0, 200 * time.Millisecond} {
			for _, tc := range []struct {
				method, cl string
				want       int
			}{
				{"POST", "", http.StatusBadGateway},
				{"POST", "0", http.StatusBadGateway},
				{"PATCH", "", http.StatusBadGateway},
				{"DELETE", "", http.StatusBadGateway},
				{"GET", "", http.StatusOK},
			} {
				t.Run(fmt.Sprintf("%s-cl%q-%v", tc.method, tc.cl, delay), func(t *testing.T) {
					t.Parallel()
					ep := startRawEndpoint(t, func(r *http.Request, nth int) rawAnswer {
						if nth == 1 { // the second request on a connection: read, then nothing
							return rawAnswer{closeAfter: true, delay: delay}
						}
						return rawAnswer{bytes: okAnswer(r)}
					})
					g := proxyTo(t, front, 1, ep.addr, "")
					rc := warmUp(t, g)
					head := []string{"Host: a.example"}
					if tc.cl != "" {
						head = append(head, "Content-Length: "+tc.cl)
					}
					rc.write(rawHead(tc.method+" /act HTTP/1.1", head...))
					resp, body := rc.readFinal(tc.method)
					if resp.StatusCode != tc.want {
						t.Fatalf("%s after the endpoint closed: %d %q, want %d", tc.method, resp.StatusCode, body, tc.want)
					}
					if n := ep.count(tc.method, "/act"); tc.method != "GET" && n != 1 {
						t.Fatalf("the endpoint read %s /act %d times, want exactly once", tc.method, n)
					}
				})
			}
		}
	})
}

// warmUp dials g and sends GET /warm on the connection, which leaves an
// endpoint connection in the gateway's pool, and returns the connection.
func warmUp(t *testing.T, g *gateway) *rawConn {
	t.Helper()
	rc := dialRaw(t, g)
	rc.write(rawHead("GET /warm HTTP/1.1", "Host: a.example"))
	if resp, _ := rc.readFinal("GET"); resp.StatusCode != 200 {
		t.Fatalf("warm-up: %d", resp.StatusCode)
	}
	return rc
}

// TestBodyAfterIdleClose: an endpoint that answered keep-alive and then
// closed the connection while it was idle: the next request, with a body
// or without, is delivered on a new connection (200), never written to
// the closed one.
func TestBodyAfterIdleClose(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, tc := range []struct{ name, method, body string }{
			{"post-body", "POST", "hello"},
			{"post-bodiless", "POST", ""},
			{"put-body", "PUT", "hello"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				closed := make(chan struct{}, 1)
				ep := startRawEndpoint(t, func(r *http.Request, nth int) rawAnswer {
					if r.URL.Path == "/warm" {
						return rawAnswer{bytes: okAnswer(r), closeAfter: true, closed: closed}
					}
					return rawAnswer{bytes: okAnswer(r)}
				})
				g := proxyTo(t, front, 1, ep.addr, "")
				rc := warmUp(t, g)
				recvWithin(t, closed, "the endpoint's close")
				head := []string{"Host: a.example"}
				if tc.body != "" {
					head = append(head, "Content-Length: "+strconv.Itoa(len(tc.body)))
				}
				rc.write(rawHead(tc.method+" /act HTTP/1.1", head...) + tc.body)
				resp, body := rc.readFinal(tc.method)
				if resp.StatusCode != 200 || string(body) != "ok:/act" {
					t.Fatalf("%s after the idle close: %d %q, want 200", tc.method, resp.StatusCode, body)
				}
				if n := ep.count(tc.method, "/act"); n != 1 {
					t.Fatalf("the endpoint read %s /act %d times, want once", tc.method, n)
				}
			})
		}
	})
}

// TestAnswerFraming: answers RFC 9112 allows are relayed (bare LF line
// ends, a chunk size with leading zeros), and an answer head over the cap
// is a 502, on every front.
func TestAnswerFraming(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 1<<20) + "\r\nContent-Length: 2\r\n\r\nok"
		for _, tc := range []struct {
			name, answer string
			want         int
			body         string
		}{
			{"bare-lf", "HTTP/1.1 200 OK\nContent-Length: 2\nX-A: 1\n\nok", 200, "ok"},
			{"bare-lf-chunked", "HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\r\nok\r\n0\r\n\r\n", 200, "ok"},
			{"chunk-leading-zeros", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0000000000000005\r\nhello\r\n0\r\n\r\n", 200, "hello"},
			{"head-over-cap", big, http.StatusBadGateway, ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				ep := startRawEndpoint(t, func(r *http.Request, _ int) rawAnswer { return rawAnswer{bytes: tc.answer, closeAfter: true} })
				// A header timeout far above the test's deadline: an answer
				// taken for incomplete would fail the test rather than pass as
				// a 504.
				g := proxyTo(t, front, 1, ep.addr, "response_header_timeout_ms: 120000")
				rc := dialRaw(t, g)
				rc.write(rawHead("GET /x HTTP/1.1", "Host: a.example"))
				resp, body := rc.readFinal("GET")
				if resp.StatusCode != tc.want || tc.body != "" && string(body) != tc.body {
					t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tc.want, tc.body)
				}
				if n := g.protocolErrors(t, "a", "head_too_large"); (tc.want == http.StatusBadGateway) != (n == 1) {
					t.Fatalf("dwara_upstream_protocol_errors_total{reason=head_too_large} = %v", n)
				}
			})
		}
	})
}

// TestConnectionLinesAllCount: a request with five Connection lines, each
// naming a field of its own, reaches the endpoint without any of those
// fields, and an answer with five such lines reaches the client without
// its named fields, on every front (the fasthttp-side copiers read only
// the first four lines).
func TestConnectionLinesAllCount(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		seen := make(chan http.Header, 1)
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			offerSeen(seen, r.Header.Clone())
			for i := 1; i <= 5; i++ {
				w.Header().Add("Connection", fmt.Sprintf("X-R%d", i))
				w.Header().Set(fmt.Sprintf("X-R%d", i), "hop")
			}
			w.Header().Set("X-Kept", "1")
			_, _ = io.WriteString(w, "ok")
		}))
		g := proxyTo(t, front, 1, hostOf(up.URL), "")
		head := []string{"Host: a.example"}
		for i := 1; i <= 5; i++ {
			head = append(head, fmt.Sprintf("Connection: X-C%d", i), fmt.Sprintf("X-C%d: hop", i))
		}
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /x HTTP/1.1", append(head, "X-Kept: 1")...))
		resp, body := rc.readFinal("GET")
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("got %d %q", resp.StatusCode, body)
		}
		got := recvWithin(t, seen, "the request at the endpoint")
		for i := 1; i <= 5; i++ {
			if v := got.Get(fmt.Sprintf("X-C%d", i)); v != "" {
				t.Errorf("the endpoint got X-C%d: %q, named in the client's Connection line %d", i, v, i)
			}
			if v := resp.Header.Get(fmt.Sprintf("X-R%d", i)); v != "" {
				t.Errorf("the client got X-R%d: %q, named in the endpoint's Connection line %d", i, v, i)
			}
		}
		if got.Get("X-Kept") != "1" || resp.Header.Get("X-Kept") != "1" {
			t.Errorf("X-Kept lost: request %q, answer %q", got.Get("X-Kept"), resp.Header.Get("X-Kept"))
		}
	})
}
