// Package demo runs small upstream pools on loopback: each endpoint answers
// with a page naming its pool and its address. `dwara serve --demo` puts two
// of them behind the gateway so a newcomer sees the split at once, and the
// tests use them as real upstreams.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Pool is a set of running endpoints that share a name. Safe for concurrent
// use. Close stops them.
type Pool struct {
	Name  string
	Addrs []string // host:port of each endpoint, in start order

	servers []*http.Server
	hits    []atomic.Int64
	// failPerMillion is the share of requests answered 500, in millionths;
	// served counts the requests that share is taken of.
	failPerMillion atomic.Int64
	served         atomic.Int64
}

// SetFailRate makes the pool answer a share rate (0..1) of its requests
// with 500, deterministically: of every n requests, round(n*rate) fail,
// spread evenly. 0 heals it. Safe for concurrent use. Over HTTP: POST
// /fail?rate=0.2 to any endpoint of the pool.
func (p *Pool) SetFailRate(rate float64) {
	p.failPerMillion.Store(int64(min(max(rate, 0), 1) * 1e6))
}

// fails reports whether the next request is one of the failing share.
func (p *Pool) fails() bool {
	rate := p.failPerMillion.Load()
	if rate == 0 {
		return false
	}
	n := p.served.Add(1)
	return n*rate/1e6 > (n-1)*rate/1e6
}

// StartPool starts n endpoints called name, each on 127.0.0.1 on a free port.
func StartPool(name string, n int) (*Pool, error) {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	return StartPoolOn(name, addrs...)
}

// StartPoolOn starts one endpoint called name on each address (host:port;
// port 0 picks a free one).
func StartPoolOn(name string, addrs ...string) (*Pool, error) {
	p := &Pool{Name: name, hits: make([]atomic.Int64, len(addrs))}
	for i, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("start pool %s: %w", name, err)
		}
		addr := ln.Addr().String()
		srv := &http.Server{Handler: p.handler(i, addr), ReadHeaderTimeout: 10 * time.Second}
		p.Addrs = append(p.Addrs, addr)
		p.servers = append(p.servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return p, nil
}

// Hits returns how many requests endpoint i has served (health checks aside).
func (p *Pool) Hits(i int) int64 { return p.hits[i].Load() }

// Close stops every endpoint of the pool at once.
func (p *Pool) Close() {
	for _, s := range p.servers {
		_ = s.Close()
	}
}

// Shutdown stops every endpoint gracefully.
func (p *Pool) Shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range p.servers {
		errs = append(errs, s.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Echo is what an endpoint answers to a request with ?echo=1: who served it
// and what it received.
type Echo struct {
	Pool     string      `json:"pool"`
	Endpoint string      `json:"endpoint"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	Host     string      `json:"host"`
	Header   http.Header `json:"header"`
}

func (p *Pool) handler(i int, addr string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			_, _ = w.Write([]byte("ok\n"))
			return
		}
		if r.URL.Path == "/fail" && r.Method == http.MethodPost {
			rate, err := strconv.ParseFloat(r.URL.Query().Get("rate"), 64)
			if err != nil || !(rate >= 0 && rate <= 1) {
				http.Error(w, "rate must be a number in [0, 1], e.g. /fail?rate=0.2", http.StatusBadRequest)
				return
			}
			p.SetFailRate(rate)
			fmt.Fprintf(w, "pool %s now fails %.1f%% of requests\n", p.Name, rate*100)
			return
		}
		p.hits[i].Add(1)
		w.Header().Set("X-Pool", p.Name)
		w.Header().Set("X-Endpoint", addr)
		w.Header().Set("Cache-Control", "no-store")
		switch {
		case p.fails():
			http.Error(w, "pool "+p.Name+" failed this request on purpose (POST /fail?rate=0 heals it)", http.StatusInternalServerError)
		case r.URL.Query().Get("echo") == "1":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(Echo{
				Pool: p.Name, Endpoint: addr, Method: r.Method,
				Path: r.URL.Path, Host: r.Host, Header: r.Header,
			})
		case strings.Contains(r.Header.Get("Accept"), "text/html"):
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, page, html.EscapeString(p.Name), html.EscapeString(p.Name),
				html.EscapeString(addr), html.EscapeString(r.Header.Get("X-Dwara-Generation")),
				html.EscapeString(r.URL.Path))
		default:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintf(w, "pool=%s endpoint=%s generation=%s path=%s\n",
				p.Name, addr, r.Header.Get("X-Dwara-Generation"), r.URL.Path)
		}
	})
}

const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>%s</title>
<style>body{font:16px system-ui,sans-serif;margin:3rem}b{font-size:2rem}</style></head>
<body><b>%s</b><p>served by endpoint <code>%s</code> of generation <code>%s</code> for <code>%s</code></p>
<p>Reload: a sticky session keeps you on this pool.</p></body></html>
`
