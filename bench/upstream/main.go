// Command upstream is the backend that bench/compare puts behind every
// contestant: a tiny HTTP server on a loopback address that counts what it
// serves.
//
//	GET  /         200, a short body naming the pool; headers X-Pool, X-Upstream
//	GET  /bytes/N  200, a fixed body of exactly N bytes (0 <= N <= 16 MiB), same headers
//	GET  /cache/N  as /bytes/N, plus Cache-Control: public, max-age=3600, so that a
//	               proxy with a cache may store it (any query string is ignored:
//	               the workload cache asks for /cache/1024?k=1..100, a key each)
//	POST /         reads the request body and discards it, then answers as GET /
//	GET  /healthz  200 "ok" (not counted)
//	GET  /stats    200, the number of benchmark requests (the four above)
//	               served so far, as a decimal line
//
// bench/compare reads /stats on every upstream before and after a measured
// run to learn the canary share a proxy realised under load. With
// -tls-listen, -cert and -key the same routes are also served over TLS
// (HTTP/1.1 and HTTP/2 by ALPN) on a second address, for the direct
// contestant of the TLS workloads. It refuses any address that is not a
// loopback one.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// maxBytes is the largest N of /bytes/N.
const maxBytes = 16 << 20

func main() {
	listen := flag.String("listen", "", "loopback address to listen on, e.g. 127.0.0.1:18101 (required)")
	pool := flag.String("pool", "", `pool this instance belongs to: "stable" or "canary"`)
	tlsListen := flag.String("tls-listen", "", "also serve the same routes over TLS (h2 and http/1.1) on this loopback address (needs -cert and -key)")
	certFile := flag.String("cert", "", "PEM certificate for -tls-listen")
	keyFile := flag.String("key", "", "PEM key for -tls-listen")
	flag.Parse()
	if err := checkListen(*listen); err != nil {
		log.Fatalf("upstream: %v", err)
	}
	if *pool != "stable" && *pool != "canary" {
		log.Fatalf("upstream: -pool must be stable or canary, got %q", *pool)
	}
	if *tlsListen != "" {
		if err := checkListen(*tlsListen); err != nil {
			log.Fatalf("upstream: %v", err)
		}
		if *certFile == "" || *keyFile == "" {
			log.Fatal("upstream: -tls-listen needs -cert and -key")
		}
	}

	h := handler(*pool, *listen)
	newServer := func(addr string) *http.Server {
		return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 120 * time.Second}
	}
	srv := newServer(*listen)
	var tsrv *http.Server
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		srv.Close()
		if tsrv != nil {
			tsrv.Close()
		}
	}()
	if *tlsListen != "" {
		tsrv = newServer(*tlsListen)
		go func() {
			if err := tsrv.ListenAndServeTLS(*certFile, *keyFile); !errors.Is(err, http.ErrServerClosed) {
				log.Fatalf("upstream: tls: %v", err)
			}
		}()
	}
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatalf("upstream: %v", err)
	}
}

// checkListen accepts only a literal loopback IP with a port.
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-listen %q: host must be a loopback IP", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("-listen %q: port must be 1..65535", addr)
	}
	return nil
}

// sized is the prebuilt answer of one /bytes/N.
type sized struct {
	body []byte
	cl   []string
}

// handler serves /, /bytes/N, /cache/N, POST /, /healthz and /stats. Headers are
// built once (a /bytes/N body once per N), so a request only copies slices
// and bumps one atomic counter.
func handler(pool, listen string) http.Handler {
	body := []byte("pool=" + pool + " upstream=" + listen + "\n")
	poolHdr := []string{pool}
	upHdr := []string{listen}
	ctHdr := []string{"text/plain; charset=utf-8"}
	octHdr := []string{"application/octet-stream"}
	cacheHdr := []string{"public, max-age=3600"}
	clHdr := []string{strconv.Itoa(len(body))}
	var served atomic.Uint64
	small := func(w http.ResponseWriter) {
		served.Add(1)
		h := w.Header()
		h["X-Pool"] = poolHdr
		h["X-Upstream"] = upHdr
		h["Content-Type"] = ctHdr
		h["Content-Length"] = clHdr
		w.Write(body)
	}
	var sizes sync.Map // int -> *sized; a run asks for one or two sizes
	sizedBody := func(n int) *sized {
		if v, ok := sizes.Load(n); ok {
			return v.(*sized)
		}
		b := bytes.Repeat([]byte("0123456789abcdef"), n/16+1)[:n]
		v, _ := sizes.LoadOrStore(n, &sized{body: b, cl: []string{strconv.Itoa(n)}})
		return v.(*sized)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { small(w) })
	mux.HandleFunc("POST /{$}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		small(w)
	})
	// bytesN answers /bytes/N and /cache/N: cc, when not nil, is the
	// Cache-Control value.
	bytesN := func(w http.ResponseWriter, r *http.Request, prefix string, cc []string) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n > maxBytes {
			http.Error(w, "want "+prefix+"N with 0 <= N <= 16777216", http.StatusBadRequest)
			return
		}
		served.Add(1)
		s := sizedBody(n)
		h := w.Header()
		h["X-Pool"] = poolHdr
		h["X-Upstream"] = upHdr
		h["Content-Type"] = octHdr
		h["Content-Length"] = s.cl
		if cc != nil {
			h["Cache-Control"] = cc
		}
		w.Write(s.body)
	}
	mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) { bytesN(w, r, "/bytes/", nil) })
	mux.HandleFunc("GET /cache/{n}", func(w http.ResponseWriter, r *http.Request) { bytesN(w, r, "/cache/", cacheHdr) })
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Pool"] = poolHdr
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d\n", served.Load())
	})
	return mux
}
