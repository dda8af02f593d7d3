package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dwara/dwara/internal/testrun"
)

// startFastTLS serves a proxy of the endpoint up (protoUpstream) on the
// fasthttp front with TLS, a fresh certificate and each handshake bounded
// by handshake; it returns the front and the certificate.
func startFastTLS(t *testing.T, up string, handshake time.Duration) (*servingFront, *x509.Certificate) {
	return startFastTLSWith(t, up, handshake, "")
}

// startFastTLSWith is startFastTLS with the HTTP/2 server h2
// (FrontConfig.HTTP2).
func startFastTLSWith(t *testing.T, up string, handshake time.Duration, h2 string) (*servingFront, *x509.Certificate) {
	t.Helper()
	serverTLS, _, cert := testTLS(t)
	c := FrontConfig{Kind: FrontFastHTTP, ReadHeaderTimeout: handshake, IdleTimeout: time.Minute, TLS: serverTLS, Logger: discardLog, HTTP2: h2}
	return startFront(t, frontProxy(t, up), c), cert
}

// tlsClient trusts cert and speaks HTTP/2 and HTTP/1.1; each call opens a
// new connection.
func tlsClient(cert *x509.Certificate) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true, ForceAttemptHTTP2: true}
	return &http.Client{Transport: tr, Timeout: wait}
}

// readAll reads resp's body to its end and closes it.
func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wait bounds every wait of the TLS front's tests.
const wait = testrun.Timeout

// getTLS1 sends "GET path" as HTTP/1.1 over a new TLS connection to addr
// that trusts cert and offers alpn, and returns the answer with its body
// read, and the protocol the handshake negotiated.
func getTLS1(t *testing.T, addr string, cert *x509.Certificate, alpn []string, path string) (resp *http.Response, body, proto string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", addr, &tls.Config{RootCAs: roots, NextProtos: alpn})
	if err != nil {
		t.Fatalf("TLS dial %s offering %q: %v", addr, alpn, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read the answer offering %q: %v", alpn, err)
	}
	return resp, readAll(t, resp), conn.ConnectionState().NegotiatedProtocol
}

// TestFastFrontTLSHTTP1: on the fasthttp front, a TLS client that offers
// http/1.1 by ALPN, or no ALPN at all, is served HTTP/1.1 (by fasthttp)
// and proxied, and the endpoint sees X-Forwarded-Proto https.
func TestFastFrontTLSHTTP1(t *testing.T) {
	t.Parallel()
	gw, cert := startFastTLS(t, protoUpstream(t, nil), time.Minute)
	tests := []struct {
		name      string
		alpn      []string
		wantProto string
	}{
		{name: "alpn http/1.1", alpn: []string{"http/1.1"}, wantProto: "http/1.1"},
		{name: "no alpn", alpn: nil, wantProto: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, body, proto := getTLS1(t, gw.addr, cert, tt.alpn, "/")
			if proto != tt.wantProto {
				t.Errorf("negotiated %q, want %q", proto, tt.wantProto)
			}
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || body != "ok https" {
				t.Errorf("got %s %d %q, want HTTP/1.1 200 \"ok https\" (X-Forwarded-Proto https)", resp.Proto, resp.StatusCode, body)
			}
		})
	}
}

// TestFastFrontTLSHandshakes: on the fasthttp front, clients that connect
// and never finish a handshake (silent, or stopped inside their
// ClientHello) do not keep others from being served, and are closed once
// the read-header timeout has passed, or when the front shuts down.
func TestFastFrontTLSHandshakes(t *testing.T) {
	t.Parallel()
	up := protoUpstream(t, nil)
	// stall opens a connection to addr that sends only hello.
	stall := func(t *testing.T, addr, hello string) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, wait)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, hello); err != nil {
			t.Fatal(err)
		}
		return c
	}
	// closedByServer reads c to its end; the server must close it within
	// wait.
	closedByServer := func(t *testing.T, c net.Conn, what string) {
		t.Helper()
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		_, err := io.Copy(io.Discard, c) // an alert may come first
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Errorf("%s: still open after %v", what, wait)
		}
	}
	recordHeader := "\x16\x03\x01\x02\x00" // a handshake record of 512 bytes, never sent

	for _, h2 := range []string{"", "net/http"} {
		t.Run("others are served, HTTP/2 by "+map[string]string{"": "dwara", "net/http": "Go"}[h2], func(t *testing.T) {
			t.Parallel()
			// A handshake done in the accept loop would keep every later
			// client waiting for this timeout, past their client's (wait).
			gw, cert := startFastTLSWith(t, up, 2*wait, h2)
			silent := stall(t, gw.addr, "")
			partial := stall(t, gw.addr, recordHeader)

			resp, err := tlsClient(cert).Get("https://" + gw.addr + "/")
			if err != nil {
				t.Fatalf("HTTP/2 client beside the stalled handshakes: %v", err)
			}
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
				t.Errorf("HTTP/2 client: %s %d: %s", resp.Proto, resp.StatusCode, body)
			}
			if resp, body, _ := getTLS1(t, gw.addr, cert, nil, "/"); resp.StatusCode != http.StatusOK {
				t.Errorf("HTTP/1.1 client: %d: %s", resp.StatusCode, body)
			}
			// Shutting the front down ends the handshakes under way.
			if _, err := gw.stop(t); err != nil {
				t.Errorf("Serve after Shutdown: %v", err)
			}
			closedByServer(t, silent, "a silent client after the stop")
			closedByServer(t, partial, "a half-sent ClientHello after the stop")
		})
	}

	t.Run("closed after the read-header timeout", func(t *testing.T) {
		t.Parallel()
		gw, _ := startFastTLS(t, up, 300*time.Millisecond)
		silent := stall(t, gw.addr, "")
		partial := stall(t, gw.addr, recordHeader)
		closedByServer(t, silent, "a silent client")
		closedByServer(t, partial, "a half-sent ClientHello")
	})
}

// TestFastFrontTLSShutdown: on the fasthttp front with TLS, a graceful
// Shutdown lets a request in flight on each protocol (HTTP/2 through
// Dwara's HTTP/2 server, HTTP/1.1 through fasthttp) finish with its answer, Serve
// returns nil and, once the proxy is closed too, no goroutine is left
// behind, with idle connections of both protocols and a stalled handshake
// open when it began.
//
// It is not parallel: it looks for goroutines of the whole package.
func TestFastFrontTLSShutdown(t *testing.T) {
	arrived, release := make(chan string, 2), make(chan struct{})
	upstream := protoUpstream(t, func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/block" {
			arrived <- r.Proto
			<-release
		}
		return false
	})

	// Every goroutine that runs now is not the front's. fasthttp's clock
	// is the process's; the cleaner of a fasthttp worker pool sleeps up to
	// 10 s (MaxIdleWorkerDuration) before it sees that Serve stopped the
	// pool, and Serve has returned once stop does.
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	}
	serverTLS, roots, _ := testTLS(t)
	p := frontProxy(t, upstream)
	gw := startFront(t, p, FrontConfig{Kind: FrontFastHTTP, ReadHeaderTimeout: wait, IdleTimeout: time.Minute, TLS: serverTLS, Logger: discardLog})
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}}
	clients := map[string]*http.Client{"HTTP/2.0": {Transport: h2, Timeout: wait}, "HTTP/1.1": {Transport: h1, Timeout: wait}}
	base := "https://" + gw.addr

	// An idle connection of each protocol, and a stalled handshake.
	for proto, c := range clients {
		resp, err := c.Get(base + "/")
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		if body := readAll(t, resp); resp.Proto != proto || body != "ok https" {
			t.Fatalf("%s client: %s answered %q, want %s and \"ok https\"", proto, resp.Proto, body, proto)
		}
	}
	stalled, err := net.DialTimeout("tcp", gw.addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()

	// A request of each protocol in flight at the endpoint.
	var wg sync.WaitGroup
	for proto, c := range clients {
		wg.Go(func() {
			resp, err := c.Get(base + "/block")
			if err != nil {
				t.Errorf("%s request in flight during the stop: %v", proto, err)
				return
			}
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != "ok https" {
				t.Errorf("%s request in flight during the stop: %d %q", proto, resp.StatusCode, body)
			}
		})
	}
	testrun.Recv(t, arrived, "the first request in flight")
	testrun.Recv(t, arrived, "the second request in flight")

	stopped := make(chan error, 1)
	go func() {
		shutdownErr, serveErr := gw.stop(t)
		stopped <- errors.Join(shutdownErr, serveErr)
	}()
	// The stop has begun once the listener refuses connections.
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", gw.addr, wait)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the listener still accepts %v after the stop began", wait)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
	}
	close(release)
	wg.Wait()
	if err := testrun.Recv(t, stopped, "the front to stop"); err != nil {
		t.Errorf("Shutdown and Serve: %v, want nil", err)
	}

	h1.CloseIdleConnections()
	h2.CloseIdleConnections()
	stalled.Close()
	p.Close() // its pooled connections to the endpoint
	deadline = time.Now().Add(wait)
	for {
		err := goleak.Find(ignore...)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left %v after the stop:\n%v", wait, err)
		}
	}
}

// TestTLSHeadTimeoutFromHandshake: behind TLS too, the first request head
// of an HTTP/1.1 connection is bounded from the start of its serving (the
// end of the handshake), not from its first byte; an HTTP/2 connection is
// not bounded so: a request after a wait longer than that timeout is
// answered on it.
func TestTLSHeadTimeoutFromHandshake(t *testing.T) {
	t.Parallel()
	gw, cert := startFastTLS(t, protoUpstream(t, nil), headTimeout)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	t.Run("HTTP/1.1", func(t *testing.T) {
		t.Parallel()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", gw.addr, &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		slowFirstByte(t, c, headTimeout)
	})
	t.Run("HTTP/2", func(t *testing.T) {
		t.Parallel()
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: wait}
		for i := range 2 {
			resp, err := c.Get("https://" + gw.addr + "/")
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			if body := readAll(t, resp); resp.Proto != "HTTP/2.0" || body != "ok https" {
				t.Fatalf("request %d: %s %q, want HTTP/2.0 and \"ok https\"", i+1, resp.Proto, body)
			}
			if i == 0 {
				time.Sleep(headTimeout + 500*time.Millisecond) // past the head timeout, on the same connection
			}
		}
	})
}
