package node

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testrun"
)

// startFastTLS starts a gateway serving spec on the fasthttp front with a
// fresh certificate and limits l, once it applied the spec; it returns the
// gateway and the certificate.
func startFastTLS(t *testing.T, spec string, l Limits) (*proc, *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	cert := writeCert(t, dir, "fasthttp")
	file := filepath.Join(dir, "dwara.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	c := GatewayConfig{ConfigFile: file, Front: FrontFastHTTP}
	c.TLS = &TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	c.Limits = l
	gw := startGateway(t, c)
	gw.waitApplied(t, 1)
	return gw, cert
}

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
	a, b := pools(t)
	gw, cert := startFastTLS(t, splitFile(a, b, 100, 0), Limits{})
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
			resp, body, proto := getTLS1(t, gw.Proxy, cert, tt.alpn, "/?echo=1")
			if proto != tt.wantProto {
				t.Errorf("negotiated %q, want %q", proto, tt.wantProto)
			}
			if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || resp.Header.Get("X-Pool") != "pool-a" {
				t.Errorf("got %s %d from %q, want HTTP/1.1 200 from pool-a: %s", resp.Proto, resp.StatusCode, resp.Header.Get("X-Pool"), body)
			}
			if !strings.Contains(body, `"X-Forwarded-Proto":["https"]`) {
				t.Errorf("the endpoint saw %s, want X-Forwarded-Proto https", body)
			}
		})
	}
}

// TestFastFrontTLSHandshakes: on the fasthttp front, clients that connect
// and never finish a handshake (silent, or stopped inside their
// ClientHello) do not keep others from being served, and are closed once
// the read-header timeout has passed, or when the process stops.
func TestFastFrontTLSHandshakes(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	spec := splitFile(a, b, 100, 0)
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

	t.Run("others are served", func(t *testing.T) {
		t.Parallel()
		// A handshake done in the accept loop would keep every later
		// client waiting for this timeout, past their client's (wait).
		gw, cert := startFastTLS(t, spec, Limits{ReadHeaderTimeout: 2 * wait})
		silent := stall(t, gw.Proxy, "")
		partial := stall(t, gw.Proxy, recordHeader)

		resp, err := tlsClient(cert).Get("https://" + gw.Proxy + "/")
		if err != nil {
			t.Fatalf("HTTP/2 client beside the stalled handshakes: %v", err)
		}
		if body := readAll(t, resp); resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Errorf("HTTP/2 client: %s %d: %s", resp.Proto, resp.StatusCode, body)
		}
		if resp, body, _ := getTLS1(t, gw.Proxy, cert, nil, "/"); resp.StatusCode != http.StatusOK {
			t.Errorf("HTTP/1.1 client: %d: %s", resp.StatusCode, body)
		}
		// Stopping the process ends the handshakes under way.
		gw.stop()
		closedByServer(t, silent, "a silent client after the stop")
		closedByServer(t, partial, "a half-sent ClientHello after the stop")
	})

	t.Run("closed after the read-header timeout", func(t *testing.T) {
		t.Parallel()
		gw, _ := startFastTLS(t, spec, Limits{ReadHeaderTimeout: 300 * time.Millisecond})
		silent := stall(t, gw.Proxy, "")
		partial := stall(t, gw.Proxy, recordHeader)
		closedByServer(t, silent, "a silent client")
		closedByServer(t, partial, "a half-sent ClientHello")
	})
}

// TestFastFrontTLSShutdown: on the fasthttp front with TLS, a graceful
// stop lets a request in flight on each protocol (HTTP/2 through net/http,
// HTTP/1.1 through fasthttp) finish with its answer, returns (start checks
// it returns nil) and leaves no goroutine behind, with idle connections of
// both protocols and a stalled handshake open when it began.
//
// It is not parallel: it looks for goroutines of the whole package.
func TestFastFrontTLSShutdown(t *testing.T) {
	arrived, release := make(chan string, 2), make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			arrived <- r.Proto
			<-release
		}
		_, _ = io.WriteString(w, "ok "+r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(upstream.Close)
	spec := fmt.Sprintf(`upstreams:
  - {name: up, endpoints: [%[1]q]}
  - {name: spare, endpoints: [%[1]q]}
services:
  - name: web
    split:
      targets:
        - {upstream: up, weight: 100}
        - {upstream: spare, weight: 0}
`, upstream.Listener.Addr().String())

	// Every goroutine that runs now is not the gateway's. fasthttp's
	// clock is the process's; the cleaner of a fasthttp worker pool sleeps
	// up to 10 s (MaxIdleWorkerDuration) before it sees that Serve stopped
	// the pool, and Serve has returned once stop returns nil.
	ignore := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	}
	gw, cert := startFastTLS(t, spec, Limits{})
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	h2 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}}
	clients := map[string]*http.Client{"HTTP/2.0": {Transport: h2, Timeout: wait}, "HTTP/1.1": {Transport: h1, Timeout: wait}}
	base := "https://" + gw.Proxy

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
	stalled, err := net.DialTimeout("tcp", gw.Proxy, wait)
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

	stopped := make(chan struct{})
	go func() {
		gw.stop()
		close(stopped)
	}()
	// The stop has begun once the listener refuses connections.
	deadline := time.Now().Add(wait)
	for {
		c, err := net.DialTimeout("tcp", gw.Proxy, wait)
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
	testrun.Recv(t, stopped, "the gateway to stop")

	h1.CloseIdleConnections()
	h2.CloseIdleConnections()
	stalled.Close()
	upstream.CloseClientConnections()
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

// TestConnQueue: a connQueue hands delivered connections to Accept; once
// closed, Accept returns net.ErrClosed and deliver closes what it is
// handed.
func TestConnQueue(t *testing.T) {
	t.Parallel()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443}
	q := newConnQueue(addr)
	if q.Addr() != addr {
		t.Errorf("Addr = %v, want %v", q.Addr(), addr)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	go q.deliver(c1)
	got, err := q.Accept()
	if err != nil || got != c1 {
		t.Fatalf("Accept = %v, %v; want the delivered connection", got, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := q.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	q.deliver(c1) // closes it
	if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the peer of a connection delivered after Close reads %v, want EOF", err)
	}
}

// TestServeFastFrontTLS: serve with Front fasthttp and a certificate
// serves its proxy over TLS on that front, HTTP/2 and HTTP/1.1, and its
// admin listener over TLS.
func TestServeFastFrontTLS(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	dir := t.TempDir()
	cert := writeCert(t, dir, "serve")
	c := ServeConfig{DatabaseURL: url, Front: FrontFastHTTP}
	c.TLS = &TLSFiles{Cert: filepath.Join(dir, "cert.pem"), Key: filepath.Join(dir, "key.pem")}
	srv := startServe(t, c)

	body, err := json.Marshal(map[string]any{"message": "test", "spec": specJSON(a, b, 100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tlsClient(cert).Post("https://"+srv.Admin+"/api/v1/generations", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}
	if answer := readAll(t, resp); resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish over TLS: %d %s", resp.StatusCode, answer)
	}
	srv.waitApplied(t, 1)

	resp, err = tlsClient(cert).Get("https://" + srv.Proxy + "/?echo=1")
	if err != nil {
		t.Fatal(err)
	}
	answer := readAll(t, resp)
	if resp.ProtoMajor != 2 || resp.Header.Get("X-Pool") != "pool-a" || !strings.Contains(answer, `"X-Forwarded-Proto":["https"]`) {
		t.Errorf("HTTP/2: %s from %q: %s; want HTTP/2 from pool-a with X-Forwarded-Proto https", resp.Proto, resp.Header.Get("X-Pool"), answer)
	}
	resp, answer, proto := getTLS1(t, srv.Proxy, cert, []string{"http/1.1"}, "/?echo=1")
	if proto != "http/1.1" || resp.Header.Get("X-Pool") != "pool-a" || !strings.Contains(answer, `"X-Forwarded-Proto":["https"]`) {
		t.Errorf("HTTP/1.1: %q from %q: %s; want http/1.1 from pool-a with X-Forwarded-Proto https", proto, resp.Header.Get("X-Pool"), answer)
	}
}
