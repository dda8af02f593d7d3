package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// silentUpstream reads request heads (and Content-Length bodies) and never
// answers; it reports each request it read on got, and on closed each
// connection the proxy closed.
type silentUpstream struct {
	addr        string
	got, closed chan string // the request target
}

func startSilentUpstream(t *testing.T) *silentUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &silentUpstream{addr: ln.Addr().String(), got: make(chan string, 16), closed: make(chan string, 16)}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
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
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(time.Now().Add(conformanceDeadline + 5*time.Second))
				br := bufio.NewReader(c)
				r, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				u.got <- r.RequestURI
				if _, err := br.ReadByte(); err == io.EOF {
					u.closed <- r.RequestURI
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

// TestFastClientGoneBeforeAnswer: a client that goes away while the
// endpoint has not answered (it closes, or shuts down its side, after its
// head, its body, or its upgrade request) is noticed long before the
// response-header timeout of ten minutes: the endpoint's connection is
// closed, the request counted 499, not as the endpoint's failure (no
// ejection although one failure would eject), not retried, and nothing is
// left in flight.
func TestFastClientGoneBeforeAnswer(t *testing.T) {
	t.Parallel()
	a, b := startSilentUpstream(t), startSilentUpstream(t)
	g := startFastGateway(t, Options{})
	g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}, response_header_timeout_ms: 600000", a.addr, b.addr))
	cases := []struct {
		name, in  string
		halfClose bool
	}{
		{"close", rawHead("GET /close HTTP/1.1", "Host: x"), false},
		{"half close", rawHead("GET /half HTTP/1.1", "Host: x"), true},
		{"after a body", rawHead("POST /body HTTP/1.1", "Host: x", "Content-Length: 5") + "hello", false},
		{"after a chunked body", rawHead("POST /chunked HTTP/1.1", "Host: x", "Transfer-Encoding: chunked") + "5\r\nhello\r\n0\r\n\r\n", false},
		{"upgrade", rawHead("GET /upgrade HTTP/1.1", "Host: x", "Connection: Upgrade", "Upgrade: websocket"), false},
	}
	for i, c := range cases {
		target := strings.Fields(c.in)[1]
		rc := dialRaw(t, g)
		rc.write(c.in)
		var got string
		select {
		case got = <-a.got:
		case got = <-b.got:
		case <-time.After(conformanceDeadline):
			t.Fatalf("%s: the request did not reach an endpoint", c.name)
		}
		if got != target {
			t.Fatalf("%s: the endpoint got %q", c.name, got)
		}
		if c.halfClose {
			_ = rc.c.(*net.TCPConn).CloseWrite()
		} else {
			rc.c.Close()
		}
		waitCount(t, g, "u", "499", float64(i+1))
		select {
		case got = <-a.closed:
		case got = <-b.closed:
		case <-time.After(conformanceDeadline):
			t.Fatalf("%s: the endpoint's connection stayed open", c.name)
		}
		if got != target {
			t.Fatalf("%s: the connection of %q was closed", c.name, got)
		}
		if c.halfClose {
			// A client that only shut down its side reads the end: no answer.
			if rest, err := io.ReadAll(rc.br); len(rest) != 0 || err != nil {
				t.Errorf("%s: the client got %q, %v after going away; want the end", c.name, rest, err)
			}
		}
	}
	checkIdle(t, g, "u")
	if retries, ejections := g.counted("u"); retries != 0 || ejections != 0 {
		t.Errorf("%v retries, %v ejections after clients went away; want none", retries, ejections)
	}
	for _, code := range []string{"502", "504"} {
		if n := testutil.ToFloat64(g.m.requests.WithLabelValues("web", "u", code)); n != 0 {
			t.Errorf("%v requests counted %s", n, code)
		}
	}
}

// TestFastSlowAnswersStillServed: looking at the client while the answer
// is slow takes nothing from a client that stays: an answer that comes
// after several looks, one whose head comes in pieces across them, and one
// to a request with a pipelined request queued behind it (the look cannot
// see past it) are all served.
func TestFastSlowAnswersStillServed(t *testing.T) {
	t.Parallel()
	slow := 3 * FastClientCheckInterval
	up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/pieces":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 200 OK\r\nX-First: 1\r\n")
			_ = brw.Flush()
			time.Sleep(slow)
			_, _ = brw.WriteString("Content-Length: 6\r\nConnection: close\r\n\r\npieces")
			_ = brw.Flush()
			return
		case "/slow":
			time.Sleep(slow)
		}
		fmt.Fprint(w, strings.TrimPrefix(r.URL.Path, "/"))
	}))
	g := startFastGateway(t, Options{})
	g.apply(t, 1, fmt.Sprintf("upstreams: [{name: u, endpoints: [%q]}]\nservices: [{name: web, upstream: u}]\n", up.Listener.Addr().String()))
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		rc := dialRaw(t, g)
		rc.write(rawHead("POST /slow HTTP/1.1", "Host: x", "Content-Length: 2") + "hi")
		if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusOK || string(body) != "slow" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("head in pieces", func(t *testing.T) {
		t.Parallel()
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /pieces HTTP/1.1", "Host: x"))
		if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK || string(body) != "pieces" || resp.Header.Get("X-First") != "1" {
			t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		t.Parallel()
		rc := dialRaw(t, g)
		rc.write(rawHead("GET /slow HTTP/1.1", "Host: x") + rawHead("GET /next HTTP/1.1", "Host: x"))
		for _, want := range []string{"slow", "next"} {
			if resp, body := rc.readFinal(http.MethodGet); resp.StatusCode != http.StatusOK || string(body) != want {
				t.Fatalf("%d %q, want %q", resp.StatusCode, body, want)
			}
		}
	})
}

// TestFastClientGoneMidBody: a client that goes away in the middle of its
// request body is counted 499, as on the net/http front, and is no failure
// of the endpoint's; one whose body does not parse, and that waits, is
// answered 400.
func TestFastClientGoneMidBody(t *testing.T) {
	t.Parallel()
	a, b := startSilentUpstream(t), startSilentUpstream(t)
	g := startFastGateway(t, Options{})
	g.apply(t, 1, upstreamSpec("passive: {consecutive_failures: 1}", a.addr, b.addr))
	rc := dialRaw(t, g)
	// More than fasthttp reads before the handler (8 KiB): a client that
	// goes away within those is never a request.
	rc.write(rawHead("POST /upload HTTP/1.1", "Host: x", "Content-Length: 1048576") + strings.Repeat("x", 64<<10))
	rc.c.Close()
	waitCount(t, g, "u", "499", 1)

	rc = dialRaw(t, g)
	rc.write(rawHead("POST /x HTTP/1.1", "Host: x", "Transfer-Encoding: chunked") + "zz\r\nabc\r\n0\r\n\r\n")
	if resp, body := rc.readFinal(http.MethodPost); resp.StatusCode != http.StatusBadRequest || !resp.Close {
		t.Fatalf("bad body: %d, close %v: %s; want 400 and the connection closed", resp.StatusCode, resp.Close, body)
	}
	checkIdle(t, g, "u")
	if retries, ejections := g.counted("u"); retries != 0 || ejections != 0 {
		t.Errorf("%v retries, %v ejections; want none", retries, ejections)
	}
	if n := testutil.ToFloat64(g.m.requests.WithLabelValues("web", "u", "400")); n != 1 {
		t.Errorf("%v requests counted 400, want the bad body's 1", n)
	}
}

// unwrapConn wraps a connection as a listener's connection limit does
// (node's limitConn): it is no syscall.Conn, but unwraps to one.
type unwrapConn struct{ net.Conn }

// Unwrap returns the connection under the wrapper.
func (c *unwrapConn) Unwrap() net.Conn { return c.Conn }

// TestFastPeerGone: a peer that is there is not gone, with or without data
// pending; one that shut down its side, or closed, is; through a wrapper
// that unwraps to the socket too.
func TestFastPeerGone(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	pair := func() (client, server net.Conn) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return client, &unwrapConn{server}
	}
	// eventually waits, at most conformanceDeadline, for PeerGone(c) to
	// report want (a FIN takes its time to arrive, even on loopback).
	eventually := func(c net.Conn, want bool, what string) {
		t.Helper()
		deadline := time.Now().Add(conformanceDeadline)
		for PeerGone(c) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: fastPeerGone = %v, want %v", what, !want, want)
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, bounded above
		}
	}
	client, server := pair()
	if PeerGone(server) {
		t.Fatal("a peer that is there is gone")
	}
	if _, err := client.Write([]byte("pipelined")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9)
	if PeerGone(server) {
		t.Fatal("a peer that sent data is gone")
	}
	if _, err := io.ReadFull(server, buf); err != nil || string(buf) != "pipelined" {
		t.Fatalf("the data peeked at was consumed: %q, %v", buf, err)
	}
	_ = client.(*net.TCPConn).CloseWrite()
	eventually(server, true, "peer shut down its side")

	client, server = pair()
	client.Close()
	eventually(server, true, "peer closed")

	// A read deadline that has passed (the server's head timeout) does not
	// hide the peer.
	client, server = pair()
	_ = server.SetReadDeadline(time.Unix(1, 0))
	client.Close()
	eventually(server, true, "peer closed, deadline passed")
}
