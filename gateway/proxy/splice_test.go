package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// knownLengthUpstream answers GET /N with N bytes of the pattern and
// Content-Length: N (HEAD with the length alone), written 64 KiB at a
// time, each write after gap; a POST with the length of the body it read
// and whether that was the pattern throughout ("N ok", or "N bad: ...");
// a PUT likewise.
// It counts the connections it accepted.
func knownLengthUpstream(t *testing.T, gap time.Duration) (addr string, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost || r.Method == http.MethodPut {
			var check patternChecker
			verdict := "ok"
			if _, err := io.Copy(&check, r.Body); err != nil {
				verdict = "bad: " + err.Error()
			}
			fmt.Fprintf(w, "%d %s", check.n, verdict)
			return
		}
		n, err := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/"), 10, 64)
		if err != nil {
			http.Error(w, "want /N", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return
		}
		body := &patternReader{n: n}
		buf := make([]byte, 64<<10)
		for {
			k, _ := body.Read(buf)
			if k == 0 {
				return
			}
			if gap > 0 {
				w.(http.Flusher).Flush()
				select {
				case <-time.After(gap):
				case <-r.Context().Done():
					return
				}
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
		}
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	return hostOf(up.URL), conns
}

// TestSplicedAnswers: answers of known length, from 8 KiB (the fasthttp
// front streams one past that from the endpoint connection's buffer
// rather than copy it twice) to 5 MiB, reach the client byte for byte
// on every front, twice over, on one client connection and one endpoint
// connection (the connection a spliced answer came on is reused); HEAD
// keeps its length. On the fasthttp front, what a large answer has past
// the first two buffers moves by splice.
func TestSplicedAnswers(t *testing.T) {
	t.Parallel()
	sizes := []int64{8 << 10, 8<<10 + 1, 16 << 10, ConnBufferSize - 1, ConnBufferSize + 1, 200_000, 256 << 10, 1<<20 + 13, 5 << 20}
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g, rc, conns := patternGateway(t, front)
		before := splicedBytes.Load()
		var atLeast int64 // bytes past the first two buffers of each answer
		for range 2 {
			for _, n := range sizes {
				rc.write(rawHead(fmt.Sprintf("GET /%d HTTP/1.1", n), "Host: x"))
				resp := rc.read(http.MethodGet)
				var check patternChecker
				if _, err := io.Copy(&check, resp.Body); err != nil || check.n != n || resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /%d: status %d, %d bytes of the pattern (%v); want 200 and all %d", n, resp.StatusCode, check.n, err, n)
				}
				atLeast += max(0, n-2*ConnBufferSize)
			}
		}
		rc.write(rawHead("HEAD /1048576 HTTP/1.1", "Host: x"))
		if resp, body := rc.readFinal(http.MethodHead); resp.StatusCode != http.StatusOK || resp.ContentLength != 1<<20 || len(body) != 0 {
			t.Fatalf("HEAD: status %d, length %d, %d body bytes; want 200, 1048576, none", resp.StatusCode, resp.ContentLength, len(body))
		}
		checkSpliced(t, g, front, conns, before, atLeast)
	})
}

// patternGateway starts a gateway on front in front of a
// knownLengthUpstream (answers without gaps, POST bodies checked against
// the pattern) and a raw client connection to it; conns counts the
// endpoint's connections.
func patternGateway(t *testing.T, front string) (g *gateway, rc *rawConn, conns *atomic.Int64) {
	t.Helper()
	addr, conns := knownLengthUpstream(t, 0)
	g = proxyTo(t, front, 1, addr, "")
	return g, dialRaw(t, g), conns
}

// checkSpliced fails t unless the endpoint of g's upstream "a" accepted
// conns of one connection, reused for every exchange, with no request in
// flight left; and, on the fasthttp front on Linux, unless the bytes moved
// by splice since before grew by atLeast.
func checkSpliced(t *testing.T, g *gateway, front string, conns *atomic.Int64, before, atLeast int64) {
	t.Helper()
	if n := conns.Load(); n != 1 {
		t.Errorf("the endpoint accepted %d connections; want the one, reused after each exchange", n)
	}
	checkIdle(t, g, "a")
	if front == FrontFastHTTP && runtime.GOOS == "linux" {
		// Other tests of the package may splice meanwhile: at least.
		if got := splicedBytes.Load() - before; got < atLeast {
			t.Errorf("%d bytes moved by splice; want at least %d", got, atLeast)
		}
	}
}

// TestSplicedAnswerEnds: the ways a relayed answer of known length ends
// early are told apart as on every path, on every front: an endpoint that
// closes in the middle of the body is the endpoint's failure (502, the
// client's connection closed short); a client that goes away in the
// middle is counted 499; one that takes nothing for the stall timeout is
// cut and counted 499; a body that keeps coming in pieces for twice the
// stall timeout in all is relayed whole.
func TestSplicedAnswerEnds(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("endpoint cuts", func(t *testing.T) {
			t.Parallel()
			body := make([]byte, 300_000)
			_, _ = (&patternReader{n: int64(len(body))}).Read(body)
			ep := startRawEndpoint(t, func(*http.Request, int) rawAnswer {
				return rawAnswer{bytes: "HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + string(body), closeAfter: true}
			})
			g := proxyTo(t, front, 1, ep.addr, "")
			rc := dialRaw(t, g)
			rc.write(rawHead("GET /cut HTTP/1.1", "Host: x"))
			resp := rc.read(http.MethodGet)
			var check patternChecker
			_, err := io.Copy(&check, resp.Body)
			if resp.StatusCode != http.StatusOK || !errors.Is(err, io.ErrUnexpectedEOF) || check.n != int64(len(body)) {
				t.Fatalf("cut answer: status %d, %d bytes (%v); want 200, the %d sent, then the connection closed short", resp.StatusCode, check.n, err, len(body))
			}
			waitCount(t, g, "a", "502", 1)
			checkIdle(t, g, "a")
		})
		t.Run("bytes after the body", func(t *testing.T) {
			t.Parallel()
			// The endpoint writes a whole answer past the body's end: the
			// body moves to its last byte and not one more, and the
			// connection the stray answer waits on carries no later request.
			body := make([]byte, 200_000)
			_, _ = (&patternReader{n: int64(len(body))}).Read(body)
			sent := make(chan struct{}, 4)
			ep := startRawEndpoint(t, func(*http.Request, int) rawAnswer {
				return rawAnswer{bytes: "HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + string(body), late: poison, lateSent: sent}
			})
			g := proxyTo(t, front, 1, ep.addr, "")
			rc := dialRaw(t, g)
			for i := range 2 {
				rc.write(rawHead("GET /stray HTTP/1.1", "Host: x"))
				resp, got := rc.readFinal(http.MethodGet)
				if resp.StatusCode != http.StatusOK || string(got) != string(body) {
					t.Fatalf("request %d: status %d, %d bytes (the first %q); want 200 and the 200000 of the body", i+1, resp.StatusCode, len(got), got[:min(len(got), 16)])
				}
				select {
				case <-sent: // the stray answer is on the connection before the next request
				case <-time.After(conformanceDeadline):
					t.Fatal("the endpoint did not send its stray answer")
				}
			}
			checkIdle(t, g, "a")
		})
		t.Run("client gone", func(t *testing.T) {
			t.Parallel()
			g, rc, _ := patternGateway(t, front)
			rc.write(rawHead(fmt.Sprintf("GET /%d HTTP/1.1", 64<<20), "Host: x"))
			resp := rc.read(http.MethodGet)
			if _, err := io.CopyN(&patternChecker{}, resp.Body, 300_000); err != nil {
				t.Fatalf("the start of the answer: %v", err)
			}
			rc.c.Close()
			waitCount(t, g, "a", "499", 1)
			checkIdle(t, g, "a")
		})
		t.Run("stalled reader", func(t *testing.T) {
			t.Parallel()
			addr, _ := knownLengthUpstream(t, 0)
			g := stallGateway(t, front, time.Second, addr)
			rc := dialRaw(t, g)
			rc.write(rawHead(fmt.Sprintf("GET /%d HTTP/1.1", 64<<20), "Host: x"))
			waitCount(t, g, "a", "499", 1)
			checkIdle(t, g, "a")
		})
		t.Run("slow body", func(t *testing.T) {
			t.Parallel()
			const stall = time.Second
			// 16 pieces, an eighth of the stall timeout apart: twice the stall
			// timeout in all, and no gap a busy machine stretches into one.
			addr, _ := knownLengthUpstream(t, stall/8)
			g := stallGateway(t, front, stall, addr)
			resp, body := get(t, client, g.URL+"/1048576", nil)
			var check patternChecker
			if _, err := check.Write([]byte(body)); err != nil || resp.StatusCode != http.StatusOK || check.n != 1<<20 {
				t.Fatalf("slow body: status %d, %d bytes (%v); want 200 and all 1048576", resp.StatusCode, check.n, err)
			}
		})
	})
}

// TestSocketSplice moves bytes between two loopback TCP connections by
// Socket.SpliceFrom: all of them, in order, with bytes held on the
// destination first; a source that ends early is the source's failure
// (io.ErrUnexpectedEOF), a destination that is gone the destination's;
// a pipe left with bytes in it is not kept for the next splice.
func TestSocketSplice(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("splice(2) is Linux's")
	}
	t.Parallel()
	const n = 3<<20 + 7
	t.Run("all", func(t *testing.T) {
		t.Parallel()
		sp := newSplicePair(t)
		srcPeer, src, ss, dst, dstPeer, ds := sp.srcPeer, sp.src, &sp.ss, sp.dst, sp.dstPeer, &sp.ds
		ds.HoldIn(make([]byte, 16))
		if !ds.Hold([]byte("held|")) {
			t.Fatal("Hold kept nothing")
		}
		go func() { _, _ = io.Copy(srcPeer, &patternReader{n: n}) }()
		got := make(chan error, 1)
		go func() {
			head := make([]byte, 5)
			if _, err := io.ReadFull(dstPeer, head); err != nil || string(head) != "held|" {
				got <- fmt.Errorf("first bytes %q (%v), want the held ones", head, err)
				return
			}
			var check patternChecker
			_, err := io.Copy(&check, io.LimitReader(dstPeer, n))
			if err == nil && check.n != n {
				err = fmt.Errorf("%d bytes, want %d", check.n, n)
			}
			got <- err
		}()
		before := splicedBytes.Load()
		moved, srcSide, err := ds.SpliceFrom(dst, ss, src, n, nil)
		if moved != n || err != nil || srcSide {
			t.Fatalf("SpliceFrom: %d moved, source's %v, %v; want %d, no error", moved, srcSide, err, n)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if d := splicedBytes.Load() - before; d < n {
			t.Errorf("splicedBytes grew by %d, want at least %d", d, n)
		}
	})
	t.Run("source ends early", func(t *testing.T) {
		t.Parallel()
		sp := newSplicePair(t)
		srcPeer, src, ss, dst, dstPeer, ds := sp.srcPeer, sp.src, &sp.ss, sp.dst, sp.dstPeer, &sp.ds
		go func() {
			_, _ = io.Copy(srcPeer, &patternReader{n: 100_000})
			srcPeer.Close()
		}()
		go func() { _, _ = io.Copy(io.Discard, dstPeer) }()
		moved, srcSide, err := ds.SpliceFrom(dst, ss, src, n, nil)
		if moved != 100_000 || !srcSide || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("SpliceFrom: %d moved, source's %v, %v; want 100000, the source's, unexpected EOF", moved, srcSide, err)
		}
	})
	t.Run("destination gone", func(t *testing.T) {
		t.Parallel()
		sp := newSplicePair(t)
		srcPeer, src, ss, dst, dstPeer, ds := sp.srcPeer, sp.src, &sp.ss, sp.dst, sp.dstPeer, &sp.ds
		// Far more than the socket buffers hold, so the reset comes
		// before the end.
		const big = 64 << 20
		go func() { _, _ = io.Copy(srcPeer, &patternReader{n: big}) }()
		// The peer reads a little, then resets the connection.
		go func() {
			_, _ = io.CopyN(io.Discard, dstPeer, 10_000)
			_ = dstPeer.(*net.TCPConn).SetLinger(0)
			dstPeer.Close()
		}()
		moved, srcSide, err := ds.SpliceFrom(dst, ss, src, big, nil)
		if err == nil || srcSide || moved >= big {
			t.Fatalf("SpliceFrom: %d moved, source's %v, %v; want the destination's failure", moved, srcSide, err)
		}
	})
	t.Run("stall deadline", func(t *testing.T) {
		t.Parallel()
		sp := newSplicePair(t)
		srcPeer, src, ss, dst, ds := sp.srcPeer, sp.src, &sp.ss, sp.dst, &sp.ds
		go func() { _, _ = io.Copy(srcPeer, &patternReader{n: 64 << 20}) }()
		// The destination's peer reads nothing: before sets a deadline
		// that ends the drain once the socket buffers are full.
		var calls int
		moved, srcSide, err := ds.SpliceFrom(dst, ss, src, 64<<20, func() {
			calls++
			_ = dst.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
		})
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || srcSide || moved >= 64<<20 || calls == 0 {
			t.Fatalf("SpliceFrom: %d moved, source's %v, %d calls of before, %v; want the destination's timeout", moved, srcSide, calls, err)
		}
	})
}

// splicePair is two loopback TCP connections for Socket.SpliceFrom: the
// source src (its peer writes) and the destination dst (its peer reads),
// with their Sockets.
type splicePair struct {
	srcPeer, src, dst, dstPeer net.Conn
	ss, ds                     Socket
}

func newSplicePair(t *testing.T) *splicePair {
	p := &splicePair{}
	p.srcPeer, p.src = testnet.TCPPair(t, conformanceDeadline)
	p.dst, p.dstPeer = testnet.TCPPair(t, conformanceDeadline)
	p.ss.Init(p.src)
	p.ds.Init(p.dst)
	return p
}

// TestDirectAnswersOverTLS: over a TLS client connection, where nothing
// is spliced, answers of known length stream into the front's writer
// straight from the endpoint's socket (Conn.ReadAnswerDirect) and still
// reach the client byte for byte, on one endpoint connection.
func TestDirectAnswersOverTLS(t *testing.T) {
	t.Parallel()
	serverTLS, roots, _ := testTLS(t)
	for _, kind := range allFronts {
		t.Run(frontName(kind), func(t *testing.T) {
			t.Parallel()
			addr, conns := knownLengthUpstream(t, 0)
			p := frontProxy(t, addr)
			s := startFront(t, p, FrontConfig{Kind: kind, ReadHeaderTimeout: testrun.Timeout, IdleTimeout: testrun.Timeout, Logger: discardLog, TLS: serverTLS})
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: testrun.Timeout}
			for _, n := range []int64{16 << 10, 200_000, 1<<20 + 13} {
				resp, err := c.Get(fmt.Sprintf("https://%s/%d", s.addr, n))
				if err != nil {
					t.Fatal(err)
				}
				var check patternChecker
				_, err = io.Copy(&check, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || check.n != n {
					t.Fatalf("GET /%d over TLS: %s %d, %d bytes of the pattern (%v); want HTTP/1.1 200 and all", n, resp.Proto, resp.StatusCode, check.n, err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("the endpoint accepted %d connections; want the one, reused", n)
			}
		})
	}
}
