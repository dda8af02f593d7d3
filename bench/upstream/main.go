// Command upstream is the backend that bench/compare puts behind every
// contestant: a tiny HTTP server on a loopback address that counts what it
// serves.
//
//	GET /        200, a short body naming the pool; headers X-Pool, X-Upstream
//	GET /healthz 200 "ok" (not counted)
//	GET /stats   200, the number of GET / served so far, as a decimal line
//
// bench/compare reads /stats on every upstream before and after a measured
// run to learn the canary share a proxy realised under load. It refuses any
// address that is not a loopback one.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	listen := flag.String("listen", "", "loopback address to listen on, e.g. 127.0.0.1:18101 (required)")
	pool := flag.String("pool", "", `pool this instance belongs to: "stable" or "canary"`)
	flag.Parse()
	if err := checkListen(*listen); err != nil {
		log.Fatalf("upstream: %v", err)
	}
	if *pool != "stable" && *pool != "canary" {
		log.Fatalf("upstream: -pool must be stable or canary, got %q", *pool)
	}

	srv := &http.Server{
		Addr:              *listen,
		Handler:           handler(*pool, *listen),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		srv.Close()
	}()
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

// handler serves /, /healthz and /stats. The headers of / are built once, so
// a request only copies slices and bumps one atomic counter.
func handler(pool, listen string) http.Handler {
	body := []byte("pool=" + pool + " upstream=" + listen + "\n")
	poolHdr := []string{pool}
	upHdr := []string{listen}
	ctHdr := []string{"text/plain; charset=utf-8"}
	clHdr := []string{strconv.Itoa(len(body))}
	var served atomic.Uint64

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		h := w.Header()
		h["X-Pool"] = poolHdr
		h["X-Upstream"] = upHdr
		h["Content-Type"] = ctHdr
		h["Content-Length"] = clHdr
		w.Write(body)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Pool"] = poolHdr
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d\n", served.Load())
	})
	return mux
}
