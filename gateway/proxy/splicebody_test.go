package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSplicedRequestBodies: request bodies of known length, from just
// under the least one moved by splice (a copy buffer) to 5 MiB, reach the
// endpoint byte for byte on every front, twice over, on one client
// connection and one endpoint connection (reused after each). On the
// fasthttp front, what a body has past the first copy buffer moves by
// splice: the bytes fasthttp holds are read, the rest never passes
// through this process.
func TestSplicedRequestBodies(t *testing.T) {
	t.Parallel()
	sizes := []int64{ConnBufferSize - 1, ConnBufferSize, ConnBufferSize + 1, 200_000, spliceBatch + 7, 1<<20 + 13, 5 << 20}
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g, rc, conns := patternGateway(t, front)
		before := splicedBytes.Load()
		var atLeast int64
		for range 2 {
			for _, n := range sizes {
				go func() { // the gateway may answer only once it has the whole body
					rc.write(rawHead("POST /up HTTP/1.1", "Host: x", "Content-Length: "+strconv.FormatInt(n, 10)))
					_, _ = io.Copy(rc.c, &patternReader{n: n})
				}()
				resp, body := rc.readFinal(http.MethodPost)
				if want := fmt.Sprintf("%d ok", n); resp.StatusCode != http.StatusOK || string(body) != want {
					t.Fatalf("POST of %d bytes: %d %q; want 200 %q", n, resp.StatusCode, body, want)
				}
				if n >= spliceBodyMin {
					atLeast += n - 2*ConnBufferSize
				}
			}
		}
		checkSpliced(t, g, front, conns, before, atLeast)
	})
}

// closingEndpoint takes one connection at a time, reads a request head
// and after bytes of its body, and closes the connection.
func closingEndpoint(t *testing.T, after int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(conformanceDeadline))
			if r, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
				_, _ = io.CopyN(io.Discard, r.Body, after)
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestSplicedRequestBodyEnds: a request body on its way by splice that
// ends early is told apart as every body is: an endpoint that closes in
// the middle of it is the endpoint's failure (502), a client that goes
// away in the middle is counted 499; neither leaves a request in flight.
func TestSplicedRequestBodyEnds(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		t.Run("endpoint closes", func(t *testing.T) {
			t.Parallel()
			g := proxyTo(t, front, 1, closingEndpoint(t, spliceBatch), "")
			rc := dialRaw(t, g)
			const n = 4 << 20
			go func() {
				rc.write(rawHead("POST /up HTTP/1.1", "Host: x", "Content-Length: "+strconv.Itoa(n)))
				_, _ = io.Copy(rc.c, &patternReader{n: n})
			}()
			if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("%d %q; want 502", resp.StatusCode, body)
			}
			waitCount(t, g, "a", "502", 1)
			checkIdle(t, g, "a")
		})
		t.Run("client goes", func(t *testing.T) {
			t.Parallel()
			g, rc, _ := patternGateway(t, front)
			rc.write(rawHead("POST /up HTTP/1.1", "Host: x", "Content-Length: 4194304"))
			_, _ = io.Copy(rc.c, &patternReader{n: 3 * spliceBatch})
			rc.c.Close()
			waitCount(t, g, "a", "499", 1)
			checkIdle(t, g, "a")
		})
	})
}

// TestSplicedBodyMirrored: a body large enough to splice, on a service
// that mirrors it (a mirror whose body cap takes it, which reads it whole
// before the forward does), reaches the real upstream and the mirror
// whole.
func TestSplicedBodyMirrored(t *testing.T) {
	fronts(t, func(t *testing.T, start func(testing.TB) *gateway) {
		real, shadow := startMirrorRecorder(t, nil), startMirrorRecorder(t, nil)
		g := start(t)
		g.apply(t, 1, mirrorSpec(real.addr(), shadow.addr(), 100, ", max_body_bytes: 1048576"))
		body := strings.Repeat("0123456789abcdef", (3*spliceBatch)/16)
		if resp := post(t, g.URL+"/x", "large", body); resp.StatusCode != 200 {
			t.Fatal(resp.StatusCode)
		}
		got := shadow.waitSeen(t, 1)
		if len(got) != 1 || got[0].body != body || real.seen()[0].body != body {
			t.Fatal("the mirror or the real upstream got a different body")
		}
	})
}

// TestSplicedBodyAfterContinue: a client that waits for 100 Continue
// before it sends a body large enough to splice gets the 100, and its
// body reaches the endpoint whole; the connection then serves the next
// request.
func TestSplicedBodyAfterContinue(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		_, rc, _ := patternGateway(t, front)
		const n = 3*spliceBatch + 5
		for range 2 {
			rc.write(rawHead("PUT /up HTTP/1.1", "Host: x", "Expect: 100-continue", "Content-Length: "+strconv.Itoa(n)))
			if interim := rc.read(http.MethodPut); interim.StatusCode != http.StatusContinue {
				t.Fatalf("before the body was sent: %d, want 100 Continue", interim.StatusCode)
			}
			go func() { _, _ = io.Copy(rc.c, &patternReader{n: n}) }()
			if resp, body := rc.readFinal(http.MethodPut); resp.StatusCode != http.StatusOK || string(body) != fmt.Sprintf("%d ok", n) {
				t.Fatalf("%d %q; want 200 %q", resp.StatusCode, body, fmt.Sprintf("%d ok", n))
			}
		}
	})
}
