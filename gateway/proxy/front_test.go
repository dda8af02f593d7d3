package proxy

import (
	"context"
	"net"
	"net/http/httptest"
	"os"
	"testing"
	"time"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewFastServer(p, time.Minute)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		_ = ln.Close()
		<-done
	})
	return "http://" + ln.Addr().String()
}
