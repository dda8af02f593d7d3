package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/internal/testcert"
	"github.com/dwara/dwara/internal/testrun"
)

// discardLog is the log of fronts whose logs no test looks at.
var discardLog = slog.New(slog.DiscardHandler)

// servingFront is a front of NewFront serving on a loopback listener.
type servingFront struct {
	front Front
	addr  string
	// served gets Serve's error once it returned.
	served chan error

	once                  sync.Once
	shutdownErr, serveErr error
}

// startFront serves p with NewFront(p, c) on a loopback listener. When the
// test ends the front is stopped, and the test fails unless Serve returned
// nil.
func startFront(t testing.TB, p *Proxy, c FrontConfig) *servingFront {
	t.Helper()
	f, err := NewFront(p, c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &servingFront{front: f, addr: ln.Addr().String(), served: make(chan error, 1)}
	go func() { s.served <- f.Serve(ln) }()
	t.Cleanup(func() {
		if _, err := s.stop(t); err != nil {
			t.Errorf("Serve returned %v after Shutdown, want nil", err)
		}
	})
	return s
}

// stop shuts s down, within testrun.Timeout, and returns Shutdown's error
// and Serve's, which must return within testrun.Timeout of it. Calls
// after the first return the same.
func (s *servingFront) stop(t testing.TB) (shutdownErr, serveErr error) {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testrun.Timeout)
		defer cancel()
		s.shutdownErr = s.front.Shutdown(ctx)
		select {
		case s.serveErr = <-s.served:
		case <-time.After(testrun.Timeout):
			s.serveErr = fmt.Errorf("Serve did not return within %v of Shutdown", testrun.Timeout)
		}
	})
	return s.shutdownErr, s.serveErr
}

// protoUpstream is an endpoint that answers "ok " and the
// X-Forwarded-Proto it was sent, unless h (when non-nil) answers first:
// h returns true when it wrote the answer.
func protoUpstream(t testing.TB, h func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h != nil && h(w, r) {
			return
		}
		_, _ = io.WriteString(w, "ok "+r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(up.Close)
	return up.Listener.Addr().String()
}

// frontProxy is a Proxy that sends every request to the endpoint addr,
// closed when the test ends.
func frontProxy(t testing.TB, addr string) *Proxy {
	t.Helper()
	p := New(Options{Metrics: prometheus.NewRegistry()})
	t.Cleanup(p.Close)
	if err := p.Apply(mustParse(t, fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr)), 1); err != nil {
		t.Fatal(err)
	}
	return p
}

// testTLS is a fresh certificate for 127.0.0.1: the server's
// configuration of it and a pool of roots that trusts it.
func testTLS(t testing.TB) (*tls.Config, *x509.CertPool, *x509.Certificate) {
	t.Helper()
	certPEM, keyPEM, cert := testcert.New(t, "front")
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, roots, cert
}

// TestNewFrontKinds: every kind of NewFront ("" among them), plain and
// with TLS, serves a request through the proxy (HTTP/2 when TLS is used,
// which every kind offers by ALPN), and its Serve returns nil after
// Shutdown, also when Shutdown came before Serve, which then closes its
// listener.
func TestNewFrontKinds(t *testing.T) {
	t.Parallel()
	p := frontProxy(t, protoUpstream(t, nil))
	serverTLS, roots, _ := testTLS(t)
	for _, kind := range append([]string{""}, allFronts...) {
		for _, secure := range []bool{false, true} {
			name := frontName(kind)
			if kind == "" {
				name = "default"
			}
			scheme, proto, major := "http", "http", 1
			if secure {
				name += "-tls"
				scheme, proto, major = "https", "https", 2
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c := FrontConfig{Kind: kind, ReadHeaderTimeout: testrun.Timeout, IdleTimeout: testrun.Timeout, MaxConns: 16, Logger: discardLog}
				tr := &http.Transport{}
				if secure {
					c.TLS = serverTLS
					tr.TLSClientConfig = &tls.Config{RootCAs: roots}
					tr.ForceAttemptHTTP2 = true
				}
				defer tr.CloseIdleConnections()
				s := startFront(t, p, c)
				resp, err := (&http.Client{Transport: tr, Timeout: testrun.Timeout}).Get(scheme + "://" + s.addr + "/")
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || resp.ProtoMajor != major || string(body) != "ok "+proto {
					t.Errorf("%s %d %q (%v); want HTTP/%d 200 %q", resp.Proto, resp.StatusCode, body, err, major, "ok "+proto)
				}
				// The client's connection is left idle: Shutdown closes it.
				shutdownErr, serveErr := s.stop(t)
				if shutdownErr != nil {
					t.Errorf("Shutdown with only an idle connection open: %v, want nil", shutdownErr)
				}
				if serveErr != nil {
					t.Errorf("Serve after Shutdown: %v, want nil", serveErr)
				}
				if c, err := net.Dial("tcp", s.addr); err == nil {
					c.Close()
					t.Errorf("the listener still accepts after Shutdown")
				}
			})
			t.Run(name+"-shutdown-first", func(t *testing.T) {
				t.Parallel()
				c := FrontConfig{Kind: kind, Logger: discardLog}
				if secure {
					c.TLS = serverTLS
				}
				f, err := NewFront(p, c)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Shutdown(context.Background()); err != nil {
					t.Errorf("Shutdown before Serve: %v", err)
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				served := make(chan error, 1)
				go func() { served <- f.Serve(ln) }()
				if err := testrun.Recv(t, served, "Serve after Shutdown"); err != nil {
					t.Errorf("Serve after Shutdown: %v, want nil", err)
				}
				if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
					c.Close()
					t.Errorf("Serve after Shutdown left its listener open")
				}
			})
		}
	}
}

// TestNewFrontRefuses: an unknown kind is refused with the kinds there
// are; the removed loop front with why.
func TestNewFrontRefuses(t *testing.T) {
	t.Parallel()
	p := New(Options{Metrics: prometheus.NewRegistry()})
	defer p.Close()
	_, err := NewFront(p, FrontConfig{Kind: "h2o"})
	want := `unknown front "h2o": want "fasthttp" or "net/http"`
	if err == nil || err.Error() != want || !errors.Is(err, ErrUnknownFront) {
		t.Errorf("kind h2o: %v; want ErrUnknownFront: %s", err, want)
	}
	if _, err = NewFront(p, FrontConfig{Kind: "loop"}); !errors.Is(err, ErrLoopRemoved) {
		t.Errorf("kind loop: %v; want ErrLoopRemoved", err)
	}
}
