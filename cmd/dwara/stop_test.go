package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// The gateway stops cleanly on SIGTERM, on every front, however early the
// signal comes and whatever its connections are doing.

// gatewayOn writes a spec routing everything to addr and returns the
// arguments of a gateway serving it on front.
func gatewayOn(t *testing.T, front, addr string) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "spec.yaml")
	spec := fmt.Sprintf("upstreams: [{name: a, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", addr)
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"gateway", "--config", file, "--front", front, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}
}

// TestStopRightAfterStart: SIGTERM as soon as the gateway says it is
// listening exits 0, 100 times in a row on each front (a front's Serve
// must return nil when the shutdown came first).
func TestStopRightAfterStart(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	for _, front := range []string{"fasthttp", "net/http"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			args := gatewayOn(t, front, up.Listener.Addr().String())
			runs := 100
			if testing.Short() {
				runs = 10
			}
			for i := range runs {
				p := startProc(t, args...)
				p.log.waitFor(t, 0, listeningRe)
				p.signal(t, syscall.SIGTERM)
				if code := p.exitCode(t); code != 0 {
					t.Fatalf("run %d: exit code after SIGTERM = %d, want 0; stderr:\n%s", i, code, p.log)
				}
			}
		})
	}
}

// TestStopUnderKeepAlive: SIGTERM while 16 keep-alive clients send
// requests to an endpoint that answers after 20 ms and closes each
// connection (so the gateway dials all the time): the gateway exits 0,
// logs a handful of lines (a front that spins on a closed listener would
// log thousands), and no request it began serving failed. 20 times on
// each front.
func TestStopUnderKeepAlive(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond)
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(up.Close)
	for _, front := range []string{"fasthttp", "net/http"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			args := gatewayOn(t, front, up.Listener.Addr().String())
			runs := 20
			if testing.Short() {
				runs = 3
			}
			var slowest time.Duration
			for i := range runs {
				p := startProc(t, args...)
				_, m := p.log.waitFor(t, 0, listeningRe)
				p.log.waitFor(t, 0, appliedRe)
				url := "http://" + m[1] + "/"
				var ok, failed atomic.Int64
				var firstFail atomic.Value
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() {
						tr := &http.Transport{MaxIdleConnsPerHost: 1}
						defer tr.CloseIdleConnections()
						c := &http.Client{Transport: tr, Timeout: wait}
						for n := 0; n < 10000; n++ {
							select {
							case <-stop:
								return
							default:
							}
							resp, err := c.Get(url)
							if err != nil {
								// Refused or reset before any answer: the
								// gateway had stopped taking requests.
								return
							}
							body, rerr := io.ReadAll(resp.Body)
							resp.Body.Close()
							if resp.StatusCode != 200 || rerr != nil || string(body) != "ok" {
								if failed.Add(1) == 1 {
									firstFail.Store(fmt.Sprintf("%d %q %v", resp.StatusCode, body, rerr))
								}
								return
							}
							ok.Add(1)
						}
					})
				}
				stopClients := sync.OnceFunc(func() { close(stop); wg.Wait() })
				defer stopClients()
				testrun.Eventually(t, "64 requests answered before the stop", func() bool {
					if n := failed.Load(); n > 0 {
						stopClients()
						t.Fatalf("run %d: %d requests failed before the stop; first: %v; stderr:\n%s", i, n, firstFail.Load(), p.log)
					}
					return ok.Load() >= 64
				})
				mark := p.log.mark()
				began := time.Now()
				p.signal(t, syscall.SIGTERM)
				code := p.exitCode(t)
				took := time.Since(began)
				slowest = max(slowest, took)
				stopClients()
				if code != 0 {
					t.Fatalf("run %d: exit code after SIGTERM = %d, want 0; stderr:\n%s", i, code, p.log)
				}
				if n := failed.Load(); n > 0 {
					t.Fatalf("run %d: %d requests failed during the stop; first: %v", i, n, firstFail.Load())
				}
				if lines := p.log.mark() - mark; lines >= 100 {
					t.Fatalf("run %d: %d log lines during the stop, want fewer than 100; the first:\n%.4000s", i, lines, p.log.since(mark))
				}
			}
			t.Logf("%s: the slowest of %d stops took %v", front, runs, slowest)
		})
	}
}
