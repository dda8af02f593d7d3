package proxy

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// testFront is the front the tests' gateways serve with: "fasthttp" (set
// DWARA_TEST_FRONT=fasthttp) runs the whole suite against ServeFastHTTP,
// anything else against ServeHTTP.
var testFront = os.Getenv("DWARA_TEST_FRONT")

// serveFront serves p on a loopback listener with the front the tests run
// with, and returns its base URL; the server stops when the test ends.
func serveFront(t testing.TB, p *Proxy) string {
	t.Helper()
	if testFront != "fasthttp" {
		srv := httptest.NewServer(p)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	return "http://" + serveFast(t, p, nil)
}

// serveFast serves p with the fasthttp front on a loopback listener, after
// configure (when non-nil) adjusted the server, and returns its address;
// the server stops when the test ends.
func serveFast(t testing.TB, p *Proxy, configure func(*fasthttp.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewFastServer(p, time.Minute)
	if configure != nil {
		configure(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
}
