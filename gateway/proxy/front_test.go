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
// by: "fasthttp" or "net/http", the values of node's Front.
//
// allFronts are the fronts every test that concerns the proxy runs on, in
// one go test (eachFront): fasthttp, the default, and net/http, which
// serves HTTP/2. fastFronts are those that parse with fasthttp's parser.
var (
	allFronts  = []string{"fasthttp", "net/http"}
	fastFronts = []string{"fasthttp"}
)

// benchFront is the front the benchmarks serve with: the gateway's default
// unless -front names another (go test -bench=. ./gateway/proxy -front=net/http).
var benchFront = flag.String("front", "fasthttp", "the front benchmarks serve with: fasthttp or net/http")

// eachFront runs f as a subtest on each of allFronts, named after the
// front (fasthttp, nethttp: no slash, so -run can name each).
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

// serveFront serves p on a loopback listener with front (fasthttp or
// net/http) and returns its base URL; the server stops when the test
// ends.
func serveFront(t testing.TB, p *Proxy, front string) string {
	t.Helper()
	switch front {
	case "fasthttp":
		return "http://" + serveFast(t, p, nil)
	case "net/http":
		return "http://" + serveNetHTTP(t, p, nil)
	}
	t.Fatalf("front %q: want fasthttp or net/http", front)
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
	go func() { done <- srv.Serve(FastListenerHook(ln)) }() // as fastfront.Front serves it
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.ShutdownWithContext(ctx)
		_ = ln.Close()
		<-done
	})
	return ln.Addr().String()
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
	srv := &http.Server{Handler: httpHandler(p)}
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
