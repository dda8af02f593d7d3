package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// loopback is the only host the benchmark ever connects to or lets a
// process it starts listen on.
const loopback = "127.0.0.1"

// readyTimeout bounds every readiness wait.
const readyTimeout = 10 * time.Second

// reservedPorts are never handed out, even when free: other services of
// this machine expect them.
var reservedPorts = map[int]bool{3306: true, 5432: true, 6379: true}

// localURL returns http://127.0.0.1:port + path.
func localURL(port int, path string) string {
	return schemeURL("http", port, path)
}

// schemeURL returns scheme://127.0.0.1:port + path. Every URL the benchmark
// requests is built here.
func schemeURL(scheme string, port int, path string) string {
	return scheme + "://" + net.JoinHostPort(loopback, strconv.Itoa(port)) + path
}

// freePort asks the kernel for a port that is free on 127.0.0.1 now.
func freePort() (int, error) {
	for range 10 {
		ln, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, fmt.Errorf("free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !reservedPorts[port] {
			return port, nil
		}
	}
	return 0, errors.New("free port: only reserved ports offered")
}

// client makes the benchmark's own small requests (readiness, /stats,
// sticky checks): never through a proxy from the environment, no cookie
// jar, each request bounded.
var client = &http.Client{
	Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 5 * time.Second},
	Timeout:   2 * time.Second,
}

// get requests url (on 127.0.0.1) with cl and the given Cookie header (none
// when empty) and returns the status, the headers and up to 4 KiB of body.
func get(ctx context.Context, cl *http.Client, url, cookie string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, resp.Header, body, err
}

// waitReady polls GET url with cl until it answers 200, for at most
// readyTimeout. It gives up early when p (if not nil) exits, quoting the
// end of its output.
func waitReady(ctx context.Context, cl *http.Client, url string, p *proc) error {
	deadline := time.NewTimer(readyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var exited <-chan struct{}
	if p != nil {
		exited = p.done
	}
	for {
		status, _, _, err := get(ctx, cl, url, "")
		if err == nil && status == http.StatusOK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("GET %s answered %d", url, status)
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before answering GET %s (%v)%s", p.name, url, p.err, p.tail(8))
		case <-deadline.C:
			return fmt.Errorf("not ready within %s: %w", readyTimeout, err)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", context.Cause(ctx))
		case <-tick.C:
		}
	}
}

// served reads the GET / count of the upstream on port from its /stats.
func served(ctx context.Context, port int) (int64, error) {
	status, _, body, err := get(ctx, client, localURL(port, "/stats"), "")
	if err != nil {
		return 0, fmt.Errorf("stats of %d: %w", port, err)
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("stats of %d: status %d", port, status)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stats of %d: %w", port, err)
	}
	return n, nil
}

// poolCounts sums the /stats of the stable and of the canary upstreams.
func poolCounts(ctx context.Context, p pools) (stable, canary int64, err error) {
	for _, port := range p.Stable {
		n, err := served(ctx, port)
		if err != nil {
			return 0, 0, err
		}
		stable += n
	}
	for _, port := range p.Canary {
		n, err := served(ctx, port)
		if err != nil {
			return 0, 0, err
		}
		canary += n
	}
	return stable, canary, nil
}

// stickyCheck makes one cookie-less GET of url with cl, takes the affinity
// cookie named cookie from its Set-Cookie, and sends it back n times: it
// reports how many of those landed in the same pool (X-Pool) as the first.
// (HAProxy's cookie pins a server; dwara's pins the split's target, and
// the upstream's balancer picks the endpoint inside it.)
func stickyCheck(ctx context.Context, cl *http.Client, url, cookie string, n int) (string, error) {
	_, h, _, err := get(ctx, cl, url, "")
	if err != nil {
		return "", fmt.Errorf("sticky check: %w", err)
	}
	var value string
	for _, c := range (&http.Response{Header: h}).Cookies() {
		if c.Name == cookie {
			value = c.Value
		}
	}
	if value == "" {
		return "", fmt.Errorf("sticky check: no %s cookie in the answer to a request without one", cookie)
	}
	pool := h.Get("X-Pool")
	same := 0
	for range n {
		_, h, _, err := get(ctx, cl, url, cookie+"="+value)
		if err != nil {
			return "", fmt.Errorf("sticky check: %w", err)
		}
		if h.Get("X-Pool") == pool {
			same++
		}
	}
	return fmt.Sprintf("sticky check: %d/%d requests with %s=%s stayed in pool %s", same, n, cookie, value, pool), nil
}
