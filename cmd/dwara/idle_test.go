package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// TestIdleConnectionRSS measures what an idle keep-alive client connection
// costs `dwara gateway` (the default front) in resident memory. It runs
// only with DWARA_SCALE=1:
//
//	DWARA_SCALE=1 go test -run TestIdleConnectionRSS -v ./cmd/dwara
//
// It starts the gateway from a spec file on loopback, reads its VmRSS
// after a warm-up, opens DWARA_SCALE_CONNS (default 10,000) connections
// that each make one request and then stay open and idle, reads VmRSS
// again, and reports the difference per connection. It fails at 40 KiB a
// connection or more (issue 28's bound).
func TestIdleConnectionRSS(t *testing.T) {
	if os.Getenv("DWARA_SCALE") != "1" {
		t.Skip("set DWARA_SCALE=1 to measure the RSS of idle connections")
	}
	conns := 10_000
	if v := os.Getenv("DWARA_SCALE_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("DWARA_SCALE_CONNS=%q: want a positive count", v)
		}
		conns = n
	}
	pool, err := demo.StartPool("blue", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte(spectest.New().Upstream(pool.Name, pool.Addrs...).Route("web", "/", pool.Name).YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "gateway", "--config", file, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--max-conns", "-1", "--idle-timeout", "10m")
	_, m := p.log.waitFor(t, 0, listeningRe)
	p.log.waitFor(t, 0, appliedRe)
	addr := m[1]
	pid := p.cmd.Process.Pid

	// Warm-up: as many requests as there will be connections, over 64
	// connections, so the pools and the upstream side are what they will
	// be; those connections are closed before the first reading.
	warm := openConns(t, addr, 64, 64)
	for range conns / 64 {
		for _, c := range warm {
			c.request(t)
		}
	}
	for _, c := range warm {
		c.Close()
	}
	time.Sleep(time.Second)
	before := vmRSS(t, pid)

	open := openConns(t, addr, conns, 32)
	t.Cleanup(func() {
		for _, c := range open {
			c.Close()
		}
	})
	time.Sleep(2 * time.Second) // the last requests' goroutines settle
	after := vmRSS(t, pid)
	// Every connection is still served: one more request on a few of them.
	for i := 0; i < len(open); i += len(open) / 10 {
		open[i].request(t)
	}
	per := float64(after-before) / float64(conns)
	t.Logf("VmRSS %d KiB before, %d KiB with %d idle connections: %.1f KiB a connection", before, after, conns, per)
	if per >= 40 {
		t.Errorf("%.1f KiB a connection, want under 40", per)
	}
}

// clientConn is a keep-alive client connection to the gateway.
type clientConn struct {
	net.Conn
	r *bufio.Reader
}

// request sends one GET and reads its whole answer, which must be a 200.
func (c *clientConn) request(t *testing.T) {
	t.Helper()
	if err := c.tryRequest(); err != nil {
		t.Fatal(err)
	}
}

// openConns opens n connections to addr, workers at a time, each having
// made one request.
func openConns(t *testing.T, addr string, n, workers int) []*clientConn {
	t.Helper()
	out := make([]*clientConn, n)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				nc, err := net.DialTimeout("tcp", addr, wait)
				if err != nil {
					errs <- err
					return
				}
				c := &clientConn{Conn: nc, r: bufio.NewReaderSize(nc, 4096)}
				out[i] = c
				if err := c.tryRequest(); err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		for _, c := range out {
			if c != nil {
				c.Close()
			}
		}
		t.Fatal(err)
	}
	return out
}

func (c *clientConn) tryRequest() error {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n"); err != nil {
		return err
	}
	res, err := http.ReadResponse(c.r, nil)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err == nil && res.StatusCode != http.StatusOK {
		err = fmt.Errorf("answer %d", res.StatusCode)
	}
	return err
}

// vmRSS is the VmRSS of process pid, in KiB.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}
