// Command upstream runs the demo upstream pools of the scripts in demos/: it
// starts each pool with the demo package (demo.StartPoolOn) on loopback
// addresses, prints where they listen, and runs until SIGTERM or SIGINT.
//
//	upstream -pool NAME=ADDR[@DELAY][,ADDR[@DELAY]...] [-pool ...]
//
// ADDR is a loopback host:port; port 0 picks a free one. Each endpoint
// answers like every demo pool ("pool=NAME endpoint=ADDR generation=N
// path=P", POST /fail?rate=0.2 to fail a share of the pool's requests).
// An endpoint with @DELAY (a Go duration, e.g. @150ms) is slow: it waits
// that long before answering each request (/healthz and /fail excepted),
// which the least_conn and peak_ewma demos use. A pool with a slow endpoint
// runs its demo endpoints on private free ports, each behind a small
// delaying front on its public address that names the public address in
// the answer, so the pool looks the same from outside.
//
// With -ai NAME=ADDR[?OPTIONS] it also serves a fake OpenAI-compatible
// upstream (internal/fakeai) on ADDR: POST .../chat/completions,
// .../completions (streamed with "stream": true, or not) and
// .../embeddings, each answer naming the model its body asked for (the
// X-Fake-Model header) and NAME (X-Fake-Upstream). OPTIONS, as a URL
// query: fail=RATE answers that share of requests 500, ratelimit=RATE
// that share 429, ttft=DURATION waits that long before the first token
// of a streamed answer, seed=N seeds the draws (default 1). The model
// canary demo uses it:
//
//	upstream -ai stable=127.0.0.1:0 -ai flaky='127.0.0.1:0?fail=0.3'
//
// Once every endpoint listens, it prints one line per pool and per fake
// model upstream, then "ready":
//
//	pool NAME ADDR [ADDR...]
//	ready
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dwara/dwara/demo"
)

// endpoint is one ADDR[@DELAY] of a -pool flag.
type endpoint struct {
	addr  string
	delay time.Duration
}

// poolSpec is one -pool flag.
type poolSpec struct {
	name      string
	endpoints []endpoint
}

// poolFlags collects the repeated -pool flag.
type poolFlags []poolSpec

func (p *poolFlags) String() string { return fmt.Sprint(len(*p), " pools") }

func (p *poolFlags) Set(v string) error {
	s, err := parsePool(v)
	if err != nil {
		return err
	}
	*p = append(*p, s)
	return nil
}

// parsePool parses NAME=ADDR[@DELAY][,ADDR[@DELAY]...].
func parsePool(v string) (poolSpec, error) {
	name, list, ok := strings.Cut(v, "=")
	if !ok || name == "" || list == "" {
		return poolSpec{}, fmt.Errorf("%q: want NAME=ADDR[@DELAY][,ADDR...]", v)
	}
	s := poolSpec{name: name}
	for item := range strings.SplitSeq(list, ",") {
		addr, d, slow := strings.Cut(item, "@")
		e := endpoint{addr: addr}
		if slow {
			delay, err := time.ParseDuration(d)
			if err != nil || delay < 0 || delay > time.Minute {
				return poolSpec{}, fmt.Errorf("%q: delay %q must be a duration in [0, 1m], e.g. 150ms", v, d)
			}
			e.delay = delay
		}
		if err := checkLoopback(addr); err != nil {
			return poolSpec{}, fmt.Errorf("%q: %w", v, err)
		}
		s.endpoints = append(s.endpoints, e)
	}
	return s, nil
}

// checkLoopback accepts only a literal loopback IP with a port (0 allowed).
func checkLoopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q: host must be a loopback IP", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("address %q: port must be 0..65535", addr)
	}
	return nil
}

func main() {
	var pools poolFlags
	var ais aiFlags
	flag.Var(&pools, "pool", "NAME=ADDR[@DELAY][,ADDR[@DELAY]...]: a demo pool on these loopback addresses (repeat for more pools)")
	flag.Var(&ais, "ai", "NAME=ADDR[?fail=RATE&ratelimit=RATE&ttft=DURATION&seed=N]: a fake OpenAI-compatible upstream on this loopback address (repeat for more)")
	flag.Parse()
	if len(pools)+len(ais) == 0 || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	var stops []func()
	stopAll := func() {
		for _, stop := range stops {
			stop()
		}
	}
	for _, spec := range pools {
		addrs, stop, err := start(spec)
		if err != nil {
			stopAll()
			log.Fatalf("upstream: %v", err)
		}
		stops = append(stops, stop)
		fmt.Printf("pool %s %s\n", spec.name, strings.Join(addrs, " "))
	}
	for _, spec := range ais {
		addr, stop, err := startAI(spec)
		if err != nil {
			stopAll()
			log.Fatalf("upstream: %v", err)
		}
		stops = append(stops, stop)
		fmt.Printf("pool %s %s\n", spec.name, addr)
	}
	fmt.Println("ready")

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
	stopAll()
}

// start starts one pool and returns its public addresses and how to stop it.
func start(spec poolSpec) ([]string, func(), error) {
	slow := false
	addrs := make([]string, len(spec.endpoints))
	for i, e := range spec.endpoints {
		addrs[i] = e.addr
		slow = slow || e.delay > 0
	}
	if !slow {
		p, err := demo.StartPoolOn(spec.name, addrs...)
		if err != nil {
			return nil, nil, err
		}
		return p.Addrs, p.Close, nil
	}

	// The demo endpoints on private ports, each behind a front on its
	// public address.
	private := make([]string, len(addrs))
	for i := range private {
		private[i] = "127.0.0.1:0"
	}
	p, err := demo.StartPoolOn(spec.name, private...)
	if err != nil {
		return nil, nil, err
	}
	var fronts []*http.Server
	stop := func() {
		for _, s := range fronts {
			_ = s.Close()
		}
		p.Close()
	}
	public := make([]string, len(addrs))
	for i, e := range spec.endpoints {
		ln, err := net.Listen("tcp", e.addr)
		if err != nil {
			stop()
			return nil, nil, fmt.Errorf("start pool %s: %w", spec.name, err)
		}
		public[i] = ln.Addr().String()
		srv := &http.Server{
			Handler:           front(public[i], p.Addrs[i], e.delay),
			ReadHeaderTimeout: 10 * time.Second,
		}
		fronts = append(fronts, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return public, stop, nil
}

// front answers on the public address of a slow endpoint: it waits delay
// (not for /healthz and /fail), passes the request to the demo endpoint at
// private, and names public instead of private in the answer.
func front(public, private string, delay time.Duration) http.Handler {
	target := &url.URL{Scheme: "http", Host: private}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host
		},
		ModifyResponse: func(resp *http.Response) error {
			if resp.Header.Get("X-Endpoint") == private {
				resp.Header.Set("X-Endpoint", public)
			}
			body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			_ = resp.Body.Close()
			if err != nil {
				return err
			}
			body = bytes.ReplaceAll(body, []byte(private), []byte(public))
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if !errors.Is(err, context.Canceled) {
				log.Printf("upstream: front %s: %v", public, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delay > 0 && r.URL.Path != "/healthz" && r.URL.Path != "/fail" {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		rp.ServeHTTP(w, r)
	})
}
