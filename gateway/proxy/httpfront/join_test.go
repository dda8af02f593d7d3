package httpfront

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/internal/testcert"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// joinCounter is a connection that counts the joins asked of it
// (writeJoiner), as the server finds it under its TLS.
type joinCounter struct {
	net.Conn
	joins *atomic.Int32
}

func (c joinCounter) JoinNextWrite() { c.joins.Add(1) }

// TestHTTP2AnswerJoined: an HTTP/2 answer whose body is small and in
// memory when the handler returns asks the connection under the TLS to
// join its two writes, once per answer; a larger body, a streamed one
// and an HTTP/1.1 answer do not, and every answer arrives whole.
func TestHTTP2AnswerJoined(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "small")
		case "/large":
			_, _ = io.WriteString(w, strings.Repeat("l", joinMax+1))
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
		}
	}))
	t.Cleanup(up.Close)
	p := proxyTo(t, proxy.Options{}, up)

	certPEM, keyPEM, cert := testcert.New(t, "join")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(p, testrun.Timeout, time.Minute)
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.Protocols = HTTP1And2()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var joins atomic.Int32
	go func() {
		_ = srv.ServeTLS(testnet.WrapListener{Listener: ln, Wrap: func(c net.Conn) net.Conn { return joinCounter{c, &joins} }}, "", "")
	}()
	t.Cleanup(func() { _ = srv.Close() })

	roots := x509.NewCertPool()
	roots.AddCert(cert)
	client := func(h2 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: testrun.Timeout}
	}
	h2, h1 := client(true), client(false)
	for _, tc := range []struct {
		c     *http.Client
		path  string
		proto string
		body  string
		joins int32
	}{
		{h2, "/small", "HTTP/2.0", "small", 1},
		{h2, "/large", "HTTP/2.0", strings.Repeat("l", joinMax+1), 1},
		{h2, "/stream", "HTTP/2.0", "data: 1\n\n", 1},
		{h1, "/small", "HTTP/1.1", "small", 1},
		{h2, "/small", "HTTP/2.0", "small", 2},
	} {
		resp, err := tc.c.Get("https://" + ln.Addr().String() + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || resp.Proto != tc.proto || string(b) != tc.body {
			t.Fatalf("GET %s: %d %s %q, %v; want 200 %s %q", tc.path, resp.StatusCode, resp.Proto, b, err, tc.proto, tc.body)
		}
		if got := joins.Load(); got != tc.joins {
			t.Fatalf("after GET %s over %s: %d joins asked, want %d", tc.path, tc.proto, got, tc.joins)
		}
	}
}

// proxyTo returns a proxy with options o (its metrics in a registry of
// its own) serving one service, web, on the one endpoint up.
func proxyTo(t *testing.T, o proxy.Options, up *httptest.Server) *proxy.Proxy {
	t.Helper()
	o.Metrics = prometheus.NewRegistry()
	p := proxy.New(o)
	t.Cleanup(p.Close)
	s, err := config.Parse(fmt.Appendf(nil, "upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", up.Listener.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(s, 1); err != nil {
		t.Fatal(err)
	}
	return p
}
