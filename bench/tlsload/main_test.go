package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// tlsServer starts a TLS server on loopback answering 200 (or status for
// the path /status) and counting the requests it served; tickets false
// turns its session tickets off, so that nothing can resume.
func tlsServer(t *testing.T, tickets bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/status" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, "hello")
	}))
	srv.TLS = &tls.Config{SessionTicketsDisabled: !tickets}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &served
}

// configFor is a run of clients clients, each making conns connections
// of perConn requests against srv's path, trusting srv's certificate:
// bounded by the counts, not by time (the run's duration is the tests'
// generous bound).
func configFor(t *testing.T, srv *httptest.Server, path string, clients, conns, perConn int) config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	addr := strings.TrimPrefix(srv.URL, "https://")
	return config{addr: addr, host: "127.0.0.1", path: path, roots: roots, clients: clients, threads: 2,
		perConn: perConn, dur: testrun.Timeout, timeout: testrun.Timeout, conns: conns}
}

// TestResumes: every handshake but each client's first resumes the
// client's session, every request is answered and counted by the
// server, and each connection carries one request.
func TestResumes(t *testing.T) {
	srv, served := tlsServer(t, true)
	const clients, conns = 4, 5
	r := run(context.Background(), configFor(t, srv, "/", clients, conns, 1))
	if r.errors != 0 || r.requests != clients*conns {
		t.Fatalf("%d requests, %d errors; want %d requests and no error", r.requests, r.errors, clients*conns)
	}
	if r.requests != served.Load() || r.handshakes != r.requests || int64(len(r.latencies)) != r.requests {
		t.Fatalf("%d requests, %d served, %d handshakes, %d latencies; want all equal", r.requests, served.Load(), r.handshakes, len(r.latencies))
	}
	if r.resumed != r.handshakes-clients {
		t.Fatalf("%d of %d handshakes resumed; want all but each client's first (%d)", r.resumed, r.handshakes, r.handshakes-clients)
	}
	line := r.line()
	for _, f := range []string{"WRKRESULT ", fmt.Sprintf(" requests=%d ", r.requests), fmt.Sprintf(" handshakes=%d ", r.handshakes),
		fmt.Sprintf(" resumed=%d", r.resumed), " p99_us=", " errors=0 ", " err_status=0 "} {
		if !strings.Contains(line, f) {
			t.Errorf("line %q lacks %q", line, f)
		}
	}
}

// TestNoTicketsNoResumption: a server without session tickets resumes
// nothing, and tlsload says so rather than counting full handshakes as
// resumed.
func TestNoTicketsNoResumption(t *testing.T) {
	srv, _ := tlsServer(t, false)
	r := run(context.Background(), configFor(t, srv, "/", 2, 3, 1))
	if r.errors != 0 || r.handshakes != 6 {
		t.Fatalf("%d handshakes, %d errors", r.handshakes, r.errors)
	}
	if r.resumed != 0 {
		t.Fatalf("%d of %d handshakes resumed without tickets", r.resumed, r.handshakes)
	}
}

// TestRequestsPerConnection: -n requests on each connection, the
// answers read to their end (the next request on the connection is
// answered); answers that are not 2xx or 3xx are errors and err_status.
func TestRequestsPerConnection(t *testing.T) {
	srv, served := tlsServer(t, true)
	r := run(context.Background(), configFor(t, srv, "/", 2, 2, 3))
	if r.errors != 0 || r.handshakes != 4 || r.requests != 3*r.handshakes || r.requests != served.Load() {
		t.Fatalf("%d requests on %d connections (%d served), %d errors; want 3 a connection", r.requests, r.handshakes, served.Load(), r.errors)
	}
	r = run(context.Background(), configFor(t, srv, "/status", 1, 2, 2))
	if r.requests != 4 || r.errStatus != r.requests || r.errors != r.requests {
		t.Fatalf("%d requests, %d errors, %d err_status; want every 503 counted in both", r.requests, r.errors, r.errStatus)
	}
}

// TestParseConfig: the flags are checked, naming what is wrong.
func TestParseConfig(t *testing.T) {
	ca := filepath.Join(t.TempDir(), "ca.pem")
	srv, _ := tlsServer(t, true)
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	good := func() (string, string, int, int, int, time.Duration, time.Duration) {
		return "https://127.0.0.1:9/x?y=1", ca, 4, 2, 1, time.Second, time.Second
	}
	u, f, c, th, n, d, to := good()
	cfg, err := parseConfig(u, f, c, th, n, d, to)
	if err != nil || cfg.addr != "127.0.0.1:9" || cfg.path != "/x?y=1" || cfg.host != "127.0.0.1" {
		t.Fatalf("parseConfig = %+v, %v", cfg, err)
	}
	for _, tt := range []struct {
		url, ca string
		c, n    int
		want    string
	}{
		{"http://127.0.0.1:9/", ca, 4, 1, "want an https URL"},
		{"https://10.0.0.1:9/", ca, 4, 1, "not a loopback address"},
		{"https://127.0.0.1/", ca, 4, 1, "want host:port"},
		{"https://127.0.0.1:9/", ca, 0, 1, "at least 1"},
		{"https://127.0.0.1:9/", ca, 4, 0, "at least 1"},
		{"https://127.0.0.1:9/", filepath.Join(t.TempDir(), "none.pem"), 4, 1, "-ca"},
	} {
		if _, err := parseConfig(tt.url, tt.ca, tt.c, 2, tt.n, time.Second, time.Second); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseConfig(%q, c=%d, n=%d) = %v; want an error containing %q", tt.url, tt.c, tt.n, err, tt.want)
		}
	}
}
