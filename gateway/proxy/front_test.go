package proxy

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// testFront is the front the tests' gateways serve with: the gateway's
// default ("loop" on Linux, else "fasthttp") unless DWARA_TEST_FRONT names
// another: fasthttp, or net/http, which runs the whole suite against
// ServeHTTP (make test runs all three).
var testFront = cmp.Or(os.Getenv("DWARA_TEST_FRONT"), defaultTestFront())

// defaultTestFront is the gateway's default front: the loop front where it
// runs, else fasthttp.
func defaultTestFront() string {
	if LoopSupported {
		return "loop"
	}
	return "fasthttp"
}

// serveFront serves p on a loopback listener with the front the tests run
// with, and returns its base URL; the server stops when the test ends.
func serveFront(t testing.TB, p *Proxy) string {
	t.Helper()
	switch testFront {
	case "fasthttp":
		return "http://" + serveFast(t, p, nil)
	case "net/http":
		return "http://" + serveNetHTTP(t, p, nil)
	case "loop":
		return "http://" + serveLoop(t, p, nil)
	}
	t.Fatalf("DWARA_TEST_FRONT=%q: want fasthttp, net/http or loop", testFront)
	return ""
}

// serveFast serves p with the fasthttp front on a loopback listener,
// after configure (when non-nil) adjusted the server, and returns its
// address; the server stops when the test ends.
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

// serveLoop serves p with the loop front on a loopback listener, after
// configure (when non-nil) adjusted the fasthttp server it hands over to,
// and returns its address; the server stops when the test ends.
func serveLoop(t testing.TB, p *Proxy, configure func(*fasthttp.Server)) string {
	t.Helper()
	return startLoop(t, p, 0, configure).addr
}

// loopServing is a loop front serving on a loopback listener.
type loopServing struct {
	srv  *LoopServer
	addr string
	// served is closed when Serve has returned, with err.
	served chan struct{}
	err    error
}

// startLoop serves p with the loop front on a loopback listener, with at
// most maxConns connections (0: no cap), after configure (when non-nil)
// adjusted the fasthttp server it hands over to. When the test ends the
// server is shut down, and the test fails if Serve failed or did not
// return within conformanceDeadline.
func startLoop(t testing.TB, p *Proxy, maxConns int, configure func(*fasthttp.Server)) *loopServing {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fast := NewFastServer(p, time.Minute)
	if configure != nil {
		configure(fast)
	}
	ls := &loopServing{srv: NewLoopServer(p, fast, maxConns), addr: ln.Addr().String(), served: make(chan struct{})}
	go func() {
		ls.err = ls.srv.Serve(ln)
		close(ls.served)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ls.srv.Shutdown(ctx)
		select {
		case <-ls.served:
			if ls.err != nil {
				t.Errorf("loop front: %v", ls.err)
			}
		case <-time.After(conformanceDeadline):
			t.Error("the loop front did not stop")
		}
	})
	return ls
}

// serveNetHTTP serves p with the net/http front on a loopback listener
// wrapped as node wraps it (HeadCheckListener), after configure (when
// non-nil) adjusted the server, and returns its address; the server stops
// when the test ends.
func serveNetHTTP(t testing.TB, p *Proxy, configure func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	if configure != nil {
		configure(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(HeadCheckListener(ln)) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// sideFront is one front serving its own gateway in front of its own
// raw recording endpoint (serveEveryFront).
type sideFront struct {
	name string
	addr string
	up   *rawRecorder
}

// serveEveryFront starts every front this system runs, side by side, each
// with its own gateway routing every request to its own rawRecorder, and
// the request-head timeout headTimeout, whatever DWARA_TEST_FRONT says.
func serveEveryFront(t *testing.T, headTimeout time.Duration) []sideFront {
	t.Helper()
	quiet := func(srv *fasthttp.Server) {
		srv.ReadTimeout = headTimeout
		srv.Logger = log.New(io.Discard, "", 0)
	}
	var fronts []sideFront
	for _, name := range []string{"loop", "fasthttp", "net/http"} {
		if name == "loop" && !LoopSupported {
			continue
		}
		up := startRawRecorder(t)
		p := New(Options{})
		t.Cleanup(p.Close)
		spec := fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", up.addr)
		if err := p.Apply(mustParse(t, spec), 1); err != nil {
			t.Fatal(err)
		}
		f := sideFront{name: name, up: up}
		switch name {
		case "loop":
			f.addr = startLoop(t, p, 0, quiet).addr
		case "fasthttp":
			f.addr = serveFast(t, p, quiet)
		case "net/http":
			f.addr = serveNetHTTP(t, p, func(srv *http.Server) {
				srv.ReadHeaderTimeout = headTimeout
				srv.ErrorLog = log.New(io.Discard, "", 0)
			})
		}
		fronts = append(fronts, f)
	}
	return fronts
}
