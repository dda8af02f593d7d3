package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/internal/testrun"
)

// recorded is one request as the recording upstream received it.
type recorded struct {
	method, target string
	contentLength  int64
	te             []string
	body           string
	complete       bool // the body was read to its end without an error
}

// recorder is an upstream that records every request it receives and
// answers 200 "ok".
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
	srv  *httptest.Server
}

func startRecorder(t testing.TB) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, recorded{
			method: r.Method, target: r.RequestURI, contentLength: r.ContentLength,
			te: r.TransferEncoding, body: string(body), complete: err == nil,
		})
		rec.mu.Unlock()
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

// since returns the requests received from the n-th on.
func (rec *recorder) since(n int) []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs[n:]...)
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

// startFastFront serves a proxy to up with front (a front that parses
// with fasthttp's parser: fastFronts), with the given request-head
// timeout, and returns its address.
func startFastFront(t testing.TB, front, up string, headTimeout time.Duration) string {
	t.Helper()
	p := New(Options{})
	t.Cleanup(p.Close)
	if err := p.Apply(mustParse(t, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", up)), 1); err != nil {
		t.Fatal(err)
	}
	configure := func(srv *fasthttp.Server) {
		srv.ReadTimeout = headTimeout
		srv.Logger = log.New(io.Discard, "", 0) // the bad inputs would fill the log
	}
	return serveFast(t, p, configure)
}

// exchangeRaw writes in on a new connection to addr, half-closes it unless
// keepOpen, and reads until the front closes the connection or wait passes.
// It returns what came back and whether the front closed the connection.
func exchangeRaw(t testing.TB, addr string, in []byte, keepOpen bool, wait time.Duration) (out []byte, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(in); err != nil {
		return nil, true
	}
	if !keepOpen {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var buf bytes.Buffer
	_, err = io.Copy(&buf, c)
	closed = err == nil || !isTimeout(err) // EOF or a reset
	return buf.Bytes(), closed
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// statuses parses the answers in out.
func statuses(out []byte) []int {
	var codes []int
	br := bufio.NewReader(bytes.NewReader(out))
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

const pipelined = "GET /pipelined HTTP/1.1\r\nHost: x\r\n\r\n"

// TestFastFrontSmuggling sends the classic request-smuggling inputs to the
// fasthttp front through a real listener, each followed by a pipelined
// request on the same connection. Every bad input must get a 4xx answer
// (or a closed connection) and end the connection, so the pipelined
// request is never served after it; the recording upstream must never get
// a whole request the client did not send as one, in particular never the
// /smuggled request hidden in a body.
func TestFastFrontSmuggling(t *testing.T) {
	t.Parallel()
	eachFastFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			in   string
			// forwarded is the most requests the upstream may receive whole (0:
			// refused before anything reached the upstream).
			forwarded int
			// lenient: fasthttp accepts the input as one whole request (see
			// the case); the input and the pipelined request may then both be
			// served, but nothing smuggled.
			lenient bool
		}{
			{"Content-Length then Transfer-Encoding",
				"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"Transfer-Encoding then Content-Length",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"duplicate equal Content-Length",
				"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 0, false},
			{"differing Content-Length",
				"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 37\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"Transfer-Encoding gzip, chunked",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"Transfer-Encoding chunked, chunked",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"Transfer-Encoding identity",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 37\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"obsolete line folding",
				"GET / HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n", 0, false},
			{"folded Transfer-Encoding",
				"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 37\r\nTransfer-Encoding:\r\n chunked\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"space before the colon",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 37\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"invalid chunk size",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"overflowing chunk size",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\nhello\r\n0\r\n\r\n", 0, false},
			{"chunk size with a sign",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n", 0, false},
			{"chunk data longer than its size",
				"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"bare LF request line and headers",
				"GET /bare HTTP/1.1\nHost: x\n\n", 0, false},
			{"bare LF in headers",
				"GET /bare HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n", 0, false},
			// fasthttp does not keep the request line, so a bare LF ending only
			// it cannot be seen; net/http accepts it too (RFC 9112 section 2.2
			// allows a recipient to), and the request line is written anew
			// upstream, so nothing is ambiguous.
			{"bare LF ending only the request line",
				"GET /bare HTTP/1.1\nHost: x\r\n\r\n", 2, true},
			{"oversized request line",
				"GET /" + strings.Repeat("a", 64<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", 0, false},
			{"oversized headers",
				"GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Big: "+strings.Repeat("b", 1000)+"\r\n", 64) + "\r\n", 0, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				rec := startRecorder(t)
				addr := startFastFront(t, front, rec.srv.Listener.Addr().String(), 2*time.Second)
				// The connection stays open: a front that waits for more input
				// must end it by itself (the request-head timeout at the latest).
				out, closed := exchangeRaw(t, addr, []byte(tc.in+pipelined), true, 5*time.Second)
				codes := statuses(out)
				got := rec.since(0)
				whole := 0
				for _, r := range got {
					if r.target == "/smuggled" {
						t.Errorf("the upstream received the smuggled request: %+v", r)
					}
					if r.complete {
						whole++
					}
				}
				if tc.lenient {
					if whole > tc.forwarded {
						t.Errorf("the upstream received %d whole requests, want at most %d: %+v", whole, tc.forwarded, got)
					}
					t.Logf("answers %v, closed %v, upstream requests %d (whole %d)", codes, closed, len(got), whole)
					return
				}
				switch {
				case len(codes) == 0 && !closed:
					t.Errorf("no answer and the connection is still open")
				case len(codes) > 0 && (codes[0] < 400 || codes[0] > 499):
					t.Errorf("first answer %d, want a 4xx; answers %v, upstream got %+v", codes[0], codes, got)
				}
				if len(codes) > 1 {
					t.Errorf("answers %v: the connection served more after the bad input", codes)
				}
				if !closed {
					t.Errorf("the connection stayed open after the bad input")
				}
				if whole > tc.forwarded {
					t.Errorf("the upstream received %d whole requests, want at most %d: %+v", whole, tc.forwarded, got)
				}
				t.Logf("answers %v, closed %v, upstream requests %d (whole %d)", codes, closed, len(got), whole)
			})
		}
	})
}

// TestFastFrontPipelinedGood: well-framed pipelined requests (a
// Content-Length body, a chunked body, a GET) all reach the upstream,
// each once and whole, and get their answers in order.
func TestFastFrontPipelinedGood(t *testing.T) {
	t.Parallel()
	eachFastFront(t, func(t *testing.T, front string) {
		t.Parallel()
		rec := startRecorder(t)
		addr := startFastFront(t, front, rec.srv.Listener.Addr().String(), 2*time.Second)
		in := "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
			"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\n\r\n" +
			"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		out, closed := exchangeRaw(t, addr, []byte(in), true, 5*time.Second)
		if codes := statuses(out); fmt.Sprint(codes) != "[200 200 200]" || !closed {
			t.Fatalf("answers %v, closed %v; want three 200 and the connection closed", codes, closed)
		}
		got := rec.since(0)
		want := []string{"POST /a hello", "POST /b world", "GET /c "}
		if len(got) != len(want) {
			t.Fatalf("upstream got %+v, want %v", got, want)
		}
		for i, r := range got {
			if s := r.method + " " + r.target + " " + r.body; s != want[i] || !r.complete {
				t.Errorf("request %d: %q (complete %v), want %q", i, s, r.complete, want[i])
			}
		}
	})
}

// TestFastFrontHeadTimeout: a request head that never ends is cut at the
// server's request-head timeout.
func TestFastFrontHeadTimeout(t *testing.T) {
	t.Parallel()
	eachFastFront(t, func(t *testing.T, front string) {
		t.Parallel()
		rec := startRecorder(t)
		addr := startFastFront(t, front, rec.srv.Listener.Addr().String(), 500*time.Millisecond)
		// The client keeps the connection open and waits far longer than the
		// head timeout: only the server can end it first.
		if _, closed := exchangeRaw(t, addr, []byte("GET / HTTP/1.1\r\nHost: x\r\nX-Slow: a"), true, testrun.Timeout); !closed {
			t.Fatalf("the connection was still open after %v; want it closed by the 500ms head timeout", testrun.Timeout)
		}
		if n := rec.count(); n != 0 {
			t.Errorf("the upstream got %d requests", n)
		}
	})
}

// FuzzFastFrontRequest feeds arbitrary bytes as one client connection's
// input to each front that parses with fasthttp (fastFronts), each with a recording upstream behind it. Every
// request the upstream receives whole must have been sent whole by the
// client: its method and target are in the input, the upstream receives no more
// whole requests than the input has request lines, and a Content-Length
// body it receives is in the input as it is. Nothing may panic (the
// server recovers no panic of the handler: one ends the fuzzing process).
func FuzzFastFrontRequest(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + pipelined,
		"POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\nX-T: 1\r\n\r\n" + pipelined,
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 37\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n b\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
		"GET /bare HTTP/1.1\nHost: x\n\n",
		"HEAD / HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://x/abs?q=1 HTTP/1.1\r\nHost: y\r\nExpect: 100-continue\r\n\r\n",
		// An upgrade the endpoint does not take (answered as any request).
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n" + pipelined,
		"GET /v1/%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\nGET /%zz#/../ HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	type served struct {
		front, addr string
		rec         *recorder
	}
	var fronts []served
	for _, front := range fastFronts {
		rec := startRecorder(f)
		fronts = append(fronts, served{front, startFastFront(f, front, rec.srv.Listener.Addr().String(), time.Second), rec})
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, fr := range fronts {
			before := fr.rec.count()
			exchangeRaw(t, fr.addr, in, false, 3*time.Second)
			lines := 0
			for _, r := range fr.rec.since(before) {
				if !r.complete {
					continue
				}
				// An absolute-form target is forwarded in origin form (its
				// path cleaned), so the target is looked for only when the
				// input has none, and the method apart.
				absolute := bytes.Contains(in, []byte("://"))
				if !bytes.Contains(in, []byte(r.method+" ")) || !absolute && !bytes.Contains(in, []byte(r.target)) {
					t.Errorf("%s front: the upstream received %q, not a request line of the input", fr.front, r.method+" "+r.target)
				}
				if r.contentLength > 0 && len(r.te) == 0 && !bytes.Contains(in, []byte(r.body)) {
					t.Errorf("%s front: the upstream received a body that is not in the input: %q", fr.front, r.body)
				}
				lines++
			}
			if n := bytes.Count(in, []byte(" HTTP/1.")); lines > n {
				t.Errorf("%s front: the upstream received %d whole requests from an input of %d request lines", fr.front, lines, n)
			}
		}
	})
}

// TestFastFrontPipelinedBeforeSlow: of two pipelined requests, the first
// answered at once and the second only once the test lets its endpoint
// answer, the first answer reaches the client before the second is
// answered. An answer the front holds for the next read (Socket.Hold)
// must not wait for the answer to a request already read.
func TestFastFrontPipelinedBeforeSlow(t *testing.T) {
	t.Parallel()
	eachFastFront(t, func(t *testing.T, front string) {
		t.Parallel()
		release := make(chan struct{}, 1)
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/whole" {
				_, _ = io.WriteString(w, "whole")
				return
			}
			select {
			case <-release:
			case <-time.After(conformanceDeadline):
			}
			_, _ = io.WriteString(w, "later")
		}))
		// Half the endpoint's own wait: the first answer must come
		// before that wait ends.
		c := pipelineConn(t, front, up)
		sendRaw(t, c, "GET /whole HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the first answer, before the second: %v", err)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "whole" {
			t.Fatalf("first body %q, %v", b, err)
		}
		release <- struct{}{}
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the second answer: %v", err)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "later" {
			t.Fatalf("second body %q, %v", b, err)
		}
	})
}

// TestFastFrontPipelinedDuringAnswer: a request pipelined while the one
// before it is still with the endpoint (in the socket, not yet read) is
// served once that one is answered: the read after an answer finds it
// without waiting for more from the client.
func TestFastFrontPipelinedDuringAnswer(t *testing.T) {
	t.Parallel()
	eachFastFront(t, func(t *testing.T, front string) {
		t.Parallel()
		got, release := make(chan struct{}, 1), make(chan struct{}, 1)
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/first" {
				got <- struct{}{}
				select {
				case <-release:
				case <-time.After(conformanceDeadline):
				}
			}
			_, _ = io.WriteString(w, r.URL.Path)
		}))
		c := pipelineConn(t, front, up)
		sendRaw(t, c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
		<-got
		sendRaw(t, c, "GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
		// Long enough for the gateway's poller to see the second request
		// arrive while nothing reads it.
		time.Sleep(50 * time.Millisecond)
		release <- struct{}{}
		br := bufio.NewReader(c)
		for _, want := range []string{"/first", "/second"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the answer to %s: %v", want, err)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != want {
				t.Fatalf("the answer to %s: %q, %v", want, b, err)
			}
		}
	})
}

// pipelineConn is a client connection to a fasthttp front of front's
// kind proxying to up, with half the suite's deadline for what the test
// does on it; it is closed when the test ends.
func pipelineConn(t *testing.T, front string, up *httptest.Server) net.Conn {
	t.Helper()
	addr := startFastFront(t, front, up.Listener.Addr().String(), 2*time.Second)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(conformanceDeadline / 2))
	return c
}

// sendRaw writes s on c.
func sendRaw(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}
