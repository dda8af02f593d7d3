package proxy

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// A front is the name a test's subtest and serveFront know one HTTP front
// by: "loop", "fasthttp" or "net/http", the values of node's Front.
//
// allFronts are the fronts every test that concerns the proxy runs on, in
// one go test (eachFront): the loop front where it runs, fasthttp, which
// the loop front hands the rest to, and net/http, which serves HTTP/2.
// fastFronts are the two that parse with fasthttp's parser.
var (
	allFronts  = supportedFronts("loop", "fasthttp", "net/http")
	fastFronts = supportedFronts("loop", "fasthttp")
)

// supportedFronts is names without the loop front where it does not run.
func supportedFronts(names ...string) []string {
	var out []string
	for _, n := range names {
		if n != "loop" || LoopSupported {
			out = append(out, n)
		}
	}
	return out
}

// benchFront is the front the benchmarks serve with: the gateway's default
// unless -front names another (go test -bench=. ./gateway/proxy -front=net/http).
var benchFront = flag.String("front", defaultTestFront(), "the front benchmarks serve with: loop, fasthttp or net/http")

// defaultTestFront is the gateway's default front: the loop front where it
// runs, else fasthttp.
func defaultTestFront() string {
	if LoopSupported {
		return "loop"
	}
	return "fasthttp"
}

// eachFront runs f as a subtest on each of allFronts, named after the
// front (loop, fasthttp, nethttp: no slash, so -run can name each).
// The subtests run one after another unless f calls t.Parallel.
func eachFront(t *testing.T, f func(t *testing.T, front string)) {
	t.Helper()
	runFronts(t, allFronts, f)
}

// eachFastFront is eachFront on fastFronts only.
func eachFastFront(t *testing.T, f func(t *testing.T, front string)) {
	t.Helper()
	runFronts(t, fastFronts, f)
}

func runFronts(t *testing.T, fronts []string, f func(t *testing.T, front string)) {
	t.Helper()
	for _, front := range fronts {
		t.Run(frontName(front), func(t *testing.T) { f(t, front) })
	}
}

// frontName is front as a subtest's name: net/http is nethttp.
func frontName(front string) string {
	return strings.ReplaceAll(front, "/", "")
}

// serveFront serves p on a loopback listener with front (loop, fasthttp
// or net/http) and returns its base URL; the server stops when the test
// ends.
func serveFront(t testing.TB, p *Proxy, front string) string {
	t.Helper()
	switch front {
	case "fasthttp":
		return "http://" + serveFast(t, p, nil)
	case "net/http":
		return "http://" + serveNetHTTP(t, p, nil)
	case "loop":
		return "http://" + serveLoop(t, p, nil)
	}
	t.Fatalf("front %q: want fasthttp, net/http or loop", front)
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
// the request-head timeout headTimeout.
func serveEveryFront(t *testing.T, headTimeout time.Duration) []sideFront {
	t.Helper()
	quiet := func(srv *fasthttp.Server) {
		srv.ReadTimeout = headTimeout
		srv.Logger = log.New(io.Discard, "", 0)
	}
	var fronts []sideFront
	for _, name := range allFronts {
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
