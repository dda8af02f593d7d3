package proxy

// The conformance suite checks the proxy's HTTP/1.1 behaviour black-box:
// a client speaking raw bytes to the gateway on loopback, and real upstream
// servers on loopback behind it. Nothing here looks inside the proxy, so the
// suite holds for any forwarding path.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/internal/testnet"
)

// seenRequest is what an upstream handler received.
type seenRequest struct {
	method        string
	contentLength int64
	te            []string
	header        http.Header
	trailer       http.Header
	body          []byte
	err           error
}

// recordingUpstream answers every request 200 "ok" after reading its body,
// and reports what it received on the returned channel.
func recordingUpstream(t *testing.T) (*httptest.Server, <-chan seenRequest) {
	seen := make(chan seenRequest, 16)
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		offerSeen(seen, seenRequest{
			method: r.Method, contentLength: r.ContentLength, te: r.TransferEncoding,
			header: r.Header.Clone(), trailer: r.Trailer.Clone(), body: body, err: err,
		})
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	return srv, seen
}

func TestConformanceContentLength(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		body := make([]byte, 256<<10)
		if _, err := io.ReadFull(&patternReader{n: int64(len(body))}, body); err != nil {
			t.Fatal(err)
		}
		seen := make(chan seenRequest, 1)
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			offerSeen(seen, seenRequest{contentLength: r.ContentLength, te: r.TransferEncoding, body: b, err: err})
			answer := fmt.Sprintf("received %d bytes", len(b))
			w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
			_, _ = io.WriteString(w, answer)
		}))
		g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
		rc := dialRaw(t, g)
		rc.write(rawHead("POST /upload HTTP/1.1", "Host: "+hostOf(g.URL),
			"Content-Type: application/octet-stream", "Content-Length: "+strconv.Itoa(len(body))))
		rc.write(string(body))
		resp, got := rc.readFinal(http.MethodPost)

		s := recvWithin(t, seen, "request at the upstream")
		if s.err != nil || !bytes.Equal(s.body, body) {
			t.Errorf("upstream read %d bytes (err %v), want the %d sent intact", len(s.body), s.err, len(body))
		}
		if s.contentLength != int64(len(body)) || len(s.te) != 0 {
			t.Errorf("upstream saw Content-Length %d, Transfer-Encoding %q; want %d and none", s.contentLength, s.te, len(body))
		}
		want := fmt.Sprintf("received %d bytes", len(body))
		if resp.StatusCode != http.StatusOK || string(got) != want || resp.ContentLength != int64(len(want)) || len(resp.TransferEncoding) != 0 {
			t.Errorf("response %d, Content-Length %d, Transfer-Encoding %q, body %q; want 200 with Content-Length %d and %q",
				resp.StatusCode, resp.ContentLength, resp.TransferEncoding, got, len(want), want)
		}
	})
}

// testChunks is a body in pieces of different sizes, one larger than a typical
// copy buffer.
var testChunks = []string{"first,", strings.Repeat("0123456789", 7000), ",third", ",last"}

func TestConformanceChunked(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("request", func(t *testing.T) {
			t.Parallel()
			up, seen := recordingUpstream(t)
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("POST /testChunks HTTP/1.1", "Host: "+hostOf(g.URL), "Transfer-Encoding: chunked"))
			for _, c := range testChunks {
				rc.write(fmt.Sprintf("%x\r\n%s\r\n", len(c), c))
			}
			rc.write("0\r\n\r\n")
			resp, body := rc.readFinal(http.MethodPost)
			if resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Errorf("response %d %q, want 200 ok", resp.StatusCode, body)
			}
			s := recvWithin(t, seen, "request at the upstream")
			if want := strings.Join(testChunks, ""); s.err != nil || string(s.body) != want {
				t.Errorf("upstream read %d bytes (err %v), want the %d sent", len(s.body), s.err, len(want))
			}
		})
		t.Run("response", func(t *testing.T) {
			t.Parallel()
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				for _, c := range testChunks {
					_, _ = io.WriteString(w, c)
					_ = rc.Flush()
				}
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /testChunks HTTP/1.1", "Host: "+hostOf(g.URL)))
			resp, body := rc.readFinal(http.MethodGet)
			if want := strings.Join(testChunks, ""); resp.StatusCode != http.StatusOK || string(body) != want {
				t.Errorf("response %d with %d bytes, want 200 with the %d sent", resp.StatusCode, len(body), len(want))
			}
			if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" || resp.ContentLength != -1 {
				t.Errorf("Transfer-Encoding %q, Content-Length %d; want chunked and none", resp.TransferEncoding, resp.ContentLength)
			}
		})
	})
}

func TestConformanceTrailers(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("request", func(t *testing.T) {
			t.Parallel()
			up, seen := recordingUpstream(t)
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("POST /trailers HTTP/1.1", "Host: "+hostOf(g.URL), "Transfer-Encoding: chunked", "Trailer: X-Checksum"))
			rc.write("5\r\nhello\r\n0\r\nX-Checksum: c0ffee\r\n\r\n")
			if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusOK {
				t.Errorf("response %d %q, want 200", resp.StatusCode, body)
			}
			s := recvWithin(t, seen, "request at the upstream")
			if string(s.body) != "hello" {
				t.Errorf("upstream read body %q (err %v), want hello", s.body, s.err)
			}
			if got := s.trailer.Get("X-Checksum"); got != "c0ffee" {
				t.Errorf("upstream request trailer X-Checksum = %q (trailers %v), want c0ffee", got, s.trailer)
			}
		})
		t.Run("response", func(t *testing.T) {
			t.Parallel()
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-Declared")
				w.WriteHeader(http.StatusOK)
				_, _ = io.WriteString(w, "body")
				w.Header().Set("X-Declared", "d1")
				w.Header().Set(http.TrailerPrefix+"X-Undeclared", "u1")
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /trailers HTTP/1.1", "Host: "+hostOf(g.URL), "TE: trailers"))
			resp, body := rc.readFinal(http.MethodGet)
			if resp.StatusCode != http.StatusOK || string(body) != "body" {
				t.Errorf("response %d %q, want 200 body", resp.StatusCode, body)
			}
			for k, want := range map[string]string{"X-Declared": "d1", "X-Undeclared": "u1"} {
				if got := resp.Trailer.Get(k); got != want {
					t.Errorf("client trailer %s = %q (trailers %v), want %q", k, got, resp.Trailer, want)
				}
			}
		})
	})
}

func TestConformanceExpectContinue(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "read body", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b)
		}))
		g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
		const body = "the body sent only after 100 Continue"
		rc := dialRaw(t, g)
		rc.write(rawHead("PUT /object HTTP/1.1", "Host: "+hostOf(g.URL), "Expect: 100-continue",
			"Content-Length: "+strconv.Itoa(len(body))))
		interim := rc.read(http.MethodPut)
		if interim.StatusCode != http.StatusContinue {
			b, _ := io.ReadAll(interim.Body)
			t.Fatalf("before the body was sent: %d %q, want 100 Continue", interim.StatusCode, b)
		}
		rc.write(body)
		resp, got := rc.readFinal(http.MethodPut)
		if resp.StatusCode != http.StatusOK || string(got) != body {
			t.Errorf("final response %d %q, want 200 with the body echoed", resp.StatusCode, got)
		}
	})
}

// TestConformanceNoBodyResponses sends HEAD, then requests answered 204 and
// 304, then a GET, on one connection: a body byte after any of the first
// three would corrupt the response that follows it.
func TestConformanceNoBodyResponses(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		const page = "hello world"
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/page":
				w.Header().Set("Content-Length", strconv.Itoa(len(page)))
				w.Header().Set("ETag", `"v1"`)
				_, _ = io.WriteString(w, page) // discarded by the server for HEAD
			case "/no-content":
				w.WriteHeader(http.StatusNoContent)
			case "/not-modified":
				w.Header().Set("ETag", `"v1"`)
				w.WriteHeader(http.StatusNotModified)
			default:
				http.NotFound(w, r)
			}
		}))
		g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
		rc := dialRaw(t, g)
		host := "Host: " + hostOf(g.URL)

		rc.write(rawHead("HEAD /page HTTP/1.1", host))
		resp, body := rc.readFinal(http.MethodHead)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Length") != strconv.Itoa(len(page)) || len(body) != 0 {
			t.Errorf("HEAD: %d, Content-Length %q, body %q; want 200, %d, none", resp.StatusCode, resp.Header.Get("Content-Length"), body, len(page))
		}

		rc.write(rawHead("GET /no-content HTTP/1.1", host))
		resp, body = rc.readFinal(http.MethodGet)
		if resp.StatusCode != http.StatusNoContent || len(body) != 0 || len(resp.TransferEncoding) != 0 {
			t.Errorf("204: %d, Transfer-Encoding %q, body %q; want 204 with neither", resp.StatusCode, resp.TransferEncoding, body)
		}

		rc.write(rawHead("GET /not-modified HTTP/1.1", host, `If-None-Match: "v1"`))
		resp, body = rc.readFinal(http.MethodGet)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 || resp.Header.Get("ETag") != `"v1"` {
			t.Errorf("304: %d, ETag %q, body %q; want 304 with the ETag and no body", resp.StatusCode, resp.Header.Get("ETag"), body)
		}

		rc.write(rawHead("GET /page HTTP/1.1", host))
		resp, body = rc.readFinal(http.MethodGet)
		if resp.StatusCode != http.StatusOK || string(body) != page {
			t.Errorf("GET after them on the same connection: %d %q, want 200 %q", resp.StatusCode, body, page)
		}
	})
}

// TestConformanceStreamingFlush holds the upstream's response open after its
// first event until the client has read that event through the proxy: it
// passes only if the proxy flushes before the response ends.
func TestConformanceStreamingFlush(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		release := make(chan struct{})
		var once sync.Once
		releaseUpstream := func() { once.Do(func() { close(release) }) }
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = io.WriteString(w, "event: first\ndata: one\n\n")
			_ = http.NewResponseController(w).Flush()
			if !waitRelease(release, r.Context().Done()) {
				return
			}
			_, _ = io.WriteString(w, "event: second\ndata: two\n\n")
		}))
		t.Cleanup(releaseUpstream)
		g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /events HTTP/1.1", "Host: "+hostOf(g.URL), "Accept: text/event-stream"))
		resp := rc.read(http.MethodGet)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("response %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		br := bufio.NewReader(resp.Body)
		var first []string
		for range 8 {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the first event (read so far %q): %v", first, err)
			}
			if line == "\n" {
				break
			}
			first = append(first, line)
		}
		if got := strings.Join(first, ""); got != "event: first\ndata: one\n" {
			t.Fatalf("first event %q", got)
		}
		releaseUpstream()
		rest, err := io.ReadAll(br)
		if err != nil || string(rest) != "event: second\ndata: two\n\n" {
			t.Errorf("after the release: %q (err %v), want the second event and the end", rest, err)
		}
	})
}

func TestConformanceUpgrade(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !listsToken(r.Header, "Connection", "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
				http.Error(w, "upgrade to websocket expected", http.StatusBadRequest)
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			if brw.Flush() != nil {
				return
			}
			_, _ = io.Copy(c, brw) // echo until the proxy closes its side
		}))
		g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /socket HTTP/1.1", "Host: "+hostOf(g.URL), "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="))
		resp := rc.read(http.MethodGet)
		if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") ||
			!listsToken(resp.Header, "Connection", "upgrade") {
			t.Fatalf("response %d, Upgrade %q, Connection %q; want 101 to websocket", resp.StatusCode, resp.Header.Get("Upgrade"), resp.Header.Get("Connection"))
		}
		for i, msg := range []string{"ping", strings.Repeat("frame-", 2000), "\x00\x01binary\xff"} {
			rc.write(msg)
			got := make([]byte, len(msg))
			if _, err := io.ReadFull(rc.br, got); err != nil {
				t.Fatalf("message %d: reading the echo: %v", i, err)
			}
			if string(got) != msg {
				t.Fatalf("message %d: echo %q, want %q", i, got, msg)
			}
		}
	})
}

// largeBody is the size of the streamed bodies of
// TestConformanceLargeBodiesFlatMemory, and maxHeapGrowth the growth of the
// test process's heap it allows while one passes through.
const (
	largeBody     = 100 << 20
	maxHeapGrowth = 64 << 20
)

// TestConformanceLargeBodiesFlatMemory streams 100 MB each way through the
// proxy, which runs in this process, and samples the heap while it flows.
// It is not parallel: it measures the heap of the whole test process.
func TestConformanceLargeBodiesFlatMemory(t *testing.T) {
	eachFront(t, func(t *testing.T, front string) {
		t.Run("response", func(t *testing.T) {
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/octet-stream")
				_, _ = io.Copy(w, &patternReader{n: largeBody})
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			hw := newHeapWatch()
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /large HTTP/1.1", "Host: "+hostOf(g.URL)))
			resp := rc.read(http.MethodGet)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("response %d", resp.StatusCode)
			}
			check := &patternChecker{}
			sampled := &sampledReader{r: resp.Body, onRead: everyMiB(4, hw.sample)}
			if _, err := io.Copy(check, sampled); err != nil {
				t.Fatalf("after %d bytes: %v", check.n, err)
			}
			if check.n != largeBody {
				t.Errorf("client read %d bytes, want %d", check.n, largeBody)
			}
			t.Logf("heap in use grew by %d KiB at most", hw.growth()>>10)
			if g := hw.growth(); g >= maxHeapGrowth {
				t.Errorf("heap in use grew by %d MiB while the body streamed, want under %d MiB", g>>20, maxHeapGrowth>>20)
			}
		})
		t.Run("request", func(t *testing.T) {
			type result struct {
				n   int64
				err error
			}
			results := make(chan result, 1)
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				check := &patternChecker{}
				_, err := io.Copy(check, r.Body)
				offerSeen(results, result{check.n, err})
				_, _ = io.WriteString(w, "ok")
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			hw := newHeapWatch()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: conformanceDeadline}
			req, err := http.NewRequest(http.MethodPost, g.URL+"/large", &patternReader{n: largeBody, onRead: everyMiB(4, hw.sample)})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Errorf("response %d %q, want 200 ok", resp.StatusCode, body)
			}
			res := recvWithin(t, results, "the upstream's count")
			if res.err != nil || res.n != largeBody {
				t.Errorf("upstream read %d bytes (err %v), want %d", res.n, res.err, largeBody)
			}
			t.Logf("heap in use grew by %d KiB at most", hw.growth()>>10)
			if g := hw.growth(); g >= maxHeapGrowth {
				t.Errorf("heap in use grew by %d MiB while the body streamed, want under %d MiB", g>>20, maxHeapGrowth>>20)
			}
		})
	})
}

// sampledReader calls onRead with the count read so far after each Read.
type sampledReader struct {
	r      io.Reader
	n      int64
	onRead func(int64)
}

func (s *sampledReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	s.onRead(s.n)
	return n, err
}

func TestConformanceHopByHop(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("request", func(t *testing.T) {
			t.Parallel()
			up, seen := recordingUpstream(t)
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /hop HTTP/1.1", "Host: "+hostOf(g.URL),
				"Connection: X-Secret, keep-alive", "X-Secret: 1", "Keep-Alive: timeout=5",
				"Proxy-Connection: x", "TE: gzip", "Proxy-Authorization: Basic eDp5", "X-Public: kept"))
			if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK {
				t.Fatalf("response %d %q", resp.StatusCode, body)
			}
			h := recvWithin(t, seen, "request at the upstream").header
			if h.Get("X-Public") != "kept" {
				t.Errorf("X-Public = %q upstream, want kept (an end-to-end header)", h.Get("X-Public"))
			}
			for _, k := range []string{"X-Secret", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization"} {
				if v, ok := h[k]; ok {
					t.Errorf("hop-by-hop %s: %q reached the upstream", k, v)
				}
			}
			if listsToken(h, "Connection", "X-Secret") {
				t.Errorf("upstream Connection %q lists the client's X-Secret", h.Values("Connection"))
			}
			if listsToken(h, "TE", "gzip") {
				t.Errorf("upstream TE %q: the client's TE: gzip reached it", h.Values("TE"))
			}
		})
		t.Run("request Upgrade without Connection upgrade", func(t *testing.T) {
			t.Parallel()
			up, seen := recordingUpstream(t)
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /hop HTTP/1.1", "Host: "+hostOf(g.URL), "Connection: keep-alive", "Upgrade: h2c"))
			if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK || string(body) != "ok" {
				t.Fatalf("response %d %q, want 200 ok", resp.StatusCode, body)
			}
			if v, ok := recvWithin(t, seen, "request at the upstream").header["Upgrade"]; ok {
				t.Errorf("hop-by-hop Upgrade %q reached the upstream", v)
			}
		})
		t.Run("response", func(t *testing.T) {
			t.Parallel()
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Written raw, so that no server library filters these fields.
				c, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nConnection: X-Up-Secret\r\nX-Up-Secret: 1\r\n" +
					"Keep-Alive: timeout=9, max=100\r\nX-Up-Public: yes\r\nContent-Length: 2\r\n\r\nok")
				_ = brw.Flush()
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /hop HTTP/1.1", "Host: "+hostOf(g.URL)))
			resp, body := rc.readFinal(http.MethodGet)
			if resp.StatusCode != http.StatusOK || string(body) != "ok" || resp.Header.Get("X-Up-Public") != "yes" {
				t.Fatalf("response %d %q, X-Up-Public %q; want 200 ok with X-Up-Public", resp.StatusCode, body, resp.Header.Get("X-Up-Public"))
			}
			for _, k := range []string{"X-Up-Secret", "Keep-Alive"} {
				if v, ok := resp.Header[k]; ok {
					t.Errorf("hop-by-hop %s: %q reached the client", k, v)
				}
			}
			if listsToken(resp.Header, "Connection", "X-Up-Secret") {
				t.Errorf("client Connection %q lists the upstream's X-Up-Secret", resp.Header.Values("Connection"))
			}
		})
	})
}

// TestConformanceForwardedHeaders checks the headers the gateway sets after
// removing the hop-by-hop ones (the README, How a request is routed): whatever the client
// sent under the same names, or listed in Connection, the upstream gets the
// gateway's values.
func TestConformanceForwardedHeaders(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		const gen = 42
		forged := []string{"X-Forwarded-For: 203.0.113.9", "X-Forwarded-Proto: https", "X-Forwarded-Host: evil.example",
			"X-Request-Id: conf.id:10-a_b", "X-Dwara-Service: forged", "X-Dwara-Upstream: forged", "X-Dwara-Generation: 999",
			"X-Dwara-Debug: forged"}
		tests := []struct {
			name    string
			headers []string
			// wantXFF lists the acceptable X-Forwarded-For values; wantID is
			// the X-Request-Id the upstream must see, "" for any valid one.
			wantXFF []string
			wantID  string
		}{
			{"no client values", nil, []string{"127.0.0.1"}, ""},
			{"client values", forged, []string{"203.0.113.9, 127.0.0.1"}, "conf.id:10-a_b"},
			{"client values named in Connection", append([]string{"Connection: keep-alive, X-Forwarded-For, X-Forwarded-Proto, " +
				"X-Forwarded-Host, X-Request-Id, X-Dwara-Service, X-Dwara-Upstream, X-Dwara-Generation, X-Dwara-Debug"}, forged...),
				// Listed in Connection, the client's X-Forwarded-For was meant
				// for the gateway alone: dropping it or appending to it are
				// both fine; the client address must come last either way.
				[]string{"127.0.0.1", "203.0.113.9, 127.0.0.1"}, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				up, seen := recordingUpstream(t)
				g := proxyTo(t, front, gen, up.Listener.Addr().String(), "")
				rc := dialRaw(t, g)
				rc.write(rawHead("GET /fwd HTTP/1.1", append([]string{"Host: app.example.test"}, tt.headers...)...))
				resp, body := rc.readFinal(http.MethodGet)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("response %d %q", resp.StatusCode, body)
				}
				h := recvWithin(t, seen, "request at the upstream").header
				want := map[string]string{
					"X-Forwarded-Proto":  "http",
					"X-Forwarded-Host":   "app.example.test",
					"X-Dwara-Service":    "web",
					"X-Dwara-Upstream":   "a",
					"X-Dwara-Generation": strconv.Itoa(gen),
				}
				for k, v := range want {
					if got := strings.Join(h.Values(k), ","); got != v {
						t.Errorf("upstream saw %s = %q, want %q", k, got, v)
					}
				}
				if v, ok := h["X-Dwara-Debug"]; ok {
					t.Errorf("client X-Dwara-Debug %q reached the upstream", v)
				}
				xff := strings.Join(h.Values("X-Forwarded-For"), ", ")
				okXFF := false
				for _, w := range tt.wantXFF {
					okXFF = okXFF || xff == w
				}
				if !okXFF {
					t.Errorf("upstream saw X-Forwarded-For = %q, want one of %q", xff, tt.wantXFF)
				}
				ids := h.Values("X-Request-Id")
				switch {
				case len(ids) != 1 || !apiv1.ValidRequestID(ids[0]):
					t.Errorf("upstream saw X-Request-Id %q, want one valid id", ids)
				case tt.wantID != "" && ids[0] != tt.wantID:
					t.Errorf("upstream saw X-Request-Id %q, want the client's %q", ids[0], tt.wantID)
				case resp.Header.Get("X-Request-Id") != ids[0]:
					t.Errorf("client was told X-Request-Id %q, upstream saw %q", resp.Header.Get("X-Request-Id"), ids[0])
				}
			})
		}
	})
}

func TestConformanceTimeouts(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		problem := func(t *testing.T, resp *http.Response, body []byte, status int) {
			t.Helper()
			var p struct {
				Status int `json:"status"`
			}
			if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" ||
				json.Unmarshal(body, &p) != nil || p.Status != status {
				t.Errorf("response %d %q %q, want %d problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), body, status)
			}
		}
		t.Run("hung upstream answers 504", func(t *testing.T) {
			t.Parallel()
			up := startHungUpstream(t)
			g := proxyTo(t, front, 1, up.addr, "response_header_timeout_ms: 300")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /hang HTTP/1.1", "Host: "+hostOf(g.URL)))
			// The raw connection's deadline is the generous bound: an answer
			// that never comes fails the read.
			resp, body := rc.readFinal(http.MethodGet)
			problem(t, resp, body, http.StatusGatewayTimeout)
			recvWithin(t, up.requests, "request at the hung upstream")
		})
		t.Run("hung upstream answers an upgrade request 504", func(t *testing.T) {
			t.Parallel()
			// Upgrades are not retried, but the upstream's header timeout
			// holds for them too.
			up := startHungUpstream(t)
			g := proxyTo(t, front, 1, up.addr, "response_header_timeout_ms: 300")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /ws HTTP/1.1", "Host: "+hostOf(g.URL), "Connection: Upgrade", "Upgrade: websocket"))
			resp, body := rc.readFinal(http.MethodGet)
			problem(t, resp, body, http.StatusGatewayTimeout)
			recvWithin(t, up.requests, "request at the hung upstream")
		})
		t.Run("slow body after a prompt header completes", func(t *testing.T) {
			t.Parallel()
			const pieces, piece = 20, 512 << 10
			up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", strconv.Itoa(pieces*piece))
				w.WriteHeader(http.StatusOK)
				rc := http.NewResponseController(w)
				_ = rc.Flush()
				body := &patternReader{n: pieces * piece}
				for i := range pieces {
					if i > 0 {
						// A slow upstream, not synchronisation: the body takes
						// longer than the response header timeout.
						time.Sleep(30 * time.Millisecond)
					}
					if _, err := io.CopyN(w, body, piece); err != nil {
						return
					}
					_ = rc.Flush()
				}
			}))
			g := proxyTo(t, front, 1, up.Listener.Addr().String(), "response_header_timeout_ms: 200")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /slow HTTP/1.1", "Host: "+hostOf(g.URL)))
			resp := rc.read(http.MethodGet)
			check := &patternChecker{}
			_, err := io.Copy(check, resp.Body)
			if resp.StatusCode != http.StatusOK || err != nil || check.n != pieces*piece {
				t.Errorf("response %d, %d bytes of %d intact (err %v); want 200 and all of them", resp.StatusCode, check.n, pieces*piece, err)
			}
		})
		t.Run("refused endpoint answers 502", func(t *testing.T) {
			t.Parallel()
			g := proxyTo(t, front, 1, testnet.ClosedAddr(t), "connect_timeout_ms: 1000")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /refused HTTP/1.1", "Host: "+hostOf(g.URL)))
			resp, body := rc.readFinal(http.MethodGet)
			problem(t, resp, body, http.StatusBadGateway)
		})
	})
}

// TestConformanceUpstreamConnections sends several requests in a row, on one
// client connection, to upstreams that keep or close their connections in
// different ways: every request succeeds, and a keep-alive upstream's
// connection is reused.
func TestConformanceUpstreamConnections(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		const requests = 5
		tests := []struct {
			name    string
			handler func(w http.ResponseWriter, r *http.Request)
			// between runs before each request but the first.
			between func(srv *httptest.Server)
			// reused: the upstream keeps its connections, so the proxy must
			// open fewer connections than it sends requests.
			reused bool
			post   bool
		}{
			{name: "keep-alive upstream", reused: true},
			{name: "Connection: close on every answer", post: true, handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				_, _ = io.WriteString(w, "ok")
			}},
			{name: "closed without notice after every answer", handler: func(w http.ResponseWriter, r *http.Request) {
				c, brw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				_ = brw.Flush()
			}},
			{name: "idle connections closed between requests", between: func(srv *httptest.Server) { srv.CloseClientConnections() }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				handler := tt.handler
				if handler == nil {
					handler = func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }
				}
				var conns, served atomic.Int64
				up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					served.Add(1)
					handler(w, r)
				}))
				up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
					if s == http.StateNew {
						conns.Add(1)
					}
				}
				up.Start()
				t.Cleanup(up.Close)
				g := proxyTo(t, front, 1, up.Listener.Addr().String(), "")
				rc := dialRaw(t, g)
				for i := range requests {
					if i > 0 && tt.between != nil {
						tt.between(up)
					}
					method, extra := http.MethodGet, []string(nil)
					if tt.post && i%2 == 1 {
						method, extra = http.MethodPost, []string{"Content-Length: 4"}
					}
					rc.write(rawHead(method+" /conn HTTP/1.1", append([]string{"Host: " + hostOf(g.URL)}, extra...)...))
					if method == http.MethodPost {
						rc.write("data")
					}
					resp, body := rc.readFinal(method)
					if resp.StatusCode != http.StatusOK || string(body) != "ok" {
						t.Fatalf("request %d (%s): %d %q, want 200 ok", i, method, resp.StatusCode, body)
					}
				}
				if n := served.Load(); n != requests {
					t.Errorf("upstream served %d requests, want %d", n, requests)
				}
				if n := conns.Load(); tt.reused && n >= requests {
					t.Errorf("proxy opened %d upstream connections for %d requests to a keep-alive upstream, want reuse", n, requests)
				}
			})
		}
	})
}
