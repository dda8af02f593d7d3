package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// conformanceDeadline bounds every wait of the conformance tests: a raw
// connection's deadline, an upstream handler waiting for the test, a client.
// It is generous on purpose: the tests assert outcomes, never latency.
const conformanceDeadline = 30 * time.Second

// startUpstream serves h on a loopback httptest server that the test closes
// when it ends. Handlers must return on their own (they all wait with
// conformanceDeadline at most), since Close waits for them.
func startUpstream(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// proxyTo starts a gateway on front whose generation gen routes every
// request to service "web", upstream "a", with the one endpoint addr. fields, when not
// empty, are more upstream fields in YAML flow syntax
// ("response_header_timeout_ms: 300").
func proxyTo(t testing.TB, front string, gen int64, addr, fields string) *gateway {
	t.Helper()
	if fields != "" {
		fields = ", " + fields
	}
	g := startGateway(t, front)
	g.apply(t, gen, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]%s}]\nservices: [{name: web, upstream: a}]\n", addr, fields))
	return g
}

// hostOf returns the host:port of an http:// URL.
func hostOf(url string) string { return strings.TrimPrefix(url, "http://") }

// rawConn is a client connection to the gateway driven byte by byte, so that
// nothing in Go's HTTP client hides or repairs what the proxy sent.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// dialRaw connects to the gateway. The connection has conformanceDeadline
// for all its reads and writes, and is closed when the test ends (before
// the gateway is, so no request of it keeps the gateway's Close waiting).
func dialRaw(t *testing.T, g *gateway) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", hostOf(g.URL))
	if err != nil {
		t.Fatalf("dial gateway: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(conformanceDeadline)); err != nil {
		t.Fatal(err)
	}
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

// rawHead formats a request head: the request line, the header lines, and the
// empty line that ends it.
func rawHead(requestLine string, headers ...string) string {
	return requestLine + "\r\n" + strings.Join(append(headers, ""), "\r\n") + "\r\n"
}

func (rc *rawConn) write(s string) {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, s); err != nil {
		rc.t.Fatalf("write to gateway: %v", err)
	}
}

// read reads one response (informational ones included) to a request of
// method; its body is read from the connection by the caller.
func (rc *rawConn) read(method string) *http.Response {
	rc.t.Helper()
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		rc.t.Fatalf("read response to %s: %v", method, err)
	}
	return resp
}

// readFinal reads responses until a final (non-1xx) one, and returns it with
// its body read whole. At most 8 informational responses are skipped.
func (rc *rawConn) readFinal(method string) (*http.Response, []byte) {
	rc.t.Helper()
	for range 8 {
		resp := rc.read(method)
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				rc.t.Fatalf("read body of %d to %s: %v", resp.StatusCode, method, err)
			}
			return resp, body
		}
	}
	rc.t.Fatalf("more than 8 informational responses to %s", method)
	return nil, nil
}

// patternPeriod is the period of the generated bodies. It is prime, so a
// lost, repeated or reordered piece of any power-of-two size shows up as a
// mismatch.
const patternPeriod = 65521

// bodyPattern is one period of the generated bodies: fixed pseudo-random bytes.
var bodyPattern = func() []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, patternPeriod)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}()

// patternReader generates n bytes of the pattern without holding them: it
// is the body of a large request or response. onRead, when set, is called
// with the count so far after each Read.
type patternReader struct {
	n, off int64
	onRead func(off int64)
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	if rest := r.n - r.off; int64(len(p)) > rest {
		p = p[:rest]
	}
	k := 0
	for k < len(p) {
		k += copy(p[k:], bodyPattern[(r.off+int64(k))%patternPeriod:])
	}
	r.off += int64(k)
	if r.onRead != nil {
		r.onRead(r.off)
	}
	return k, nil
}

// patternChecker is an io.Writer that accepts the pattern and fails at the
// first byte that differs from it. n is the count accepted so far.
type patternChecker struct{ n int64 }

func (c *patternChecker) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		i := int(c.n % patternPeriod)
		m := min(len(p), patternPeriod-i)
		if !bytes.Equal(p[:m], bodyPattern[i:i+m]) {
			return written, fmt.Errorf("body differs from the pattern within bytes %d..%d", c.n, c.n+int64(m))
		}
		c.n += int64(m)
		written += m
		p = p[m:]
	}
	return written, nil
}

// heapWatch records the peak of runtime.MemStats.HeapInuse above the value
// it had when the watch began, after a collection. sample is safe for
// concurrent use.
type heapWatch struct {
	base uint64
	peak atomic.Uint64
}

func newHeapWatch() *heapWatch {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapWatch{base: ms.HeapInuse}
	h.peak.Store(ms.HeapInuse)
	return h
}

func (h *heapWatch) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for {
		p := h.peak.Load()
		if ms.HeapInuse <= p || h.peak.CompareAndSwap(p, ms.HeapInuse) {
			return
		}
	}
}

// growth is the peak HeapInuse seen minus the one at the start.
func (h *heapWatch) growth() uint64 { return h.peak.Load() - h.base }

// everyMiB returns a function for patternReader.onRead that calls f each
// time the count passes another step MiB.
func everyMiB(step int64, f func()) func(int64) {
	next := step << 20
	return func(off int64) {
		if off >= next {
			next = (off/(step<<20) + 1) * (step << 20)
			f()
		}
	}
}

// hungUpstream is an upstream endpoint that accepts connections and reads
// requests but never answers. Its connections are closed when the test
// ends.
type hungUpstream struct {
	addr     string
	requests chan struct{} // one value per request head read, never blocks
}

func startHungUpstream(t *testing.T) *hungUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &hungUpstream{addr: ln.Addr().String(), requests: make(chan struct{}, 64)}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
		wg     sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(time.Now().Add(conformanceDeadline + 5*time.Second))
				br := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(br); err != nil {
						return
					}
					select {
					case u.requests <- struct{}{}:
					default:
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

// recvWithin waits for a value on ch, at most conformanceDeadline.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(conformanceDeadline)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("no %s within %v", what, conformanceDeadline)
		panic("unreachable")
	}
}

// offerSeen sends v on ch unless ch is full: upstream handlers report to the
// test this way, so a handler never blocks on a test that stopped reading.
func offerSeen[T any](ch chan<- T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// listsToken reports whether a comma-separated header field of h (Connection,
// TE) lists token, case-insensitively.
func listsToken(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// waitRelease blocks until ch is closed or ctxDone is, at most conformanceDeadline,
// and reports whether ch was closed. Upstream handlers use it to hold a
// response until the test lets it go.
func waitRelease(ch, ctxDone <-chan struct{}) bool {
	timer := time.NewTimer(conformanceDeadline)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-ctxDone:
	case <-timer.C:
	}
	return false
}
