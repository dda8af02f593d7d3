package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParsePool(t *testing.T) {
	t.Parallel()
	s, err := parsePool("api=127.0.0.1:0,127.0.0.1:9002@150ms,[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	want := []endpoint{{"127.0.0.1:0", 0}, {"127.0.0.1:9002", 150 * time.Millisecond}, {"[::1]:0", 0}}
	if s.name != "api" || len(s.endpoints) != len(want) {
		t.Fatalf("parsePool = %+v, want api with %v", s, want)
	}
	for i := range want {
		if s.endpoints[i] != want[i] {
			t.Errorf("endpoint %d = %+v, want %+v", i, s.endpoints[i], want[i])
		}
	}
	for _, bad := range []string{
		"", "api", "=127.0.0.1:0", "api=", "api=10.0.0.1:80", "api=localhost:80",
		"api=127.0.0.1", "api=127.0.0.1:70000", "api=127.0.0.1:0@fast", "api=127.0.0.1:0@-1s", "api=127.0.0.1:0@2m",
	} {
		if _, err := parsePool(bad); err == nil {
			t.Errorf("parsePool(%q) accepted", bad)
		}
	}
}

// TestSlowEndpoint checks that a pool with a slow endpoint names its public
// addresses, delays only the slow one, and shares one fail rate.
func TestSlowEndpoint(t *testing.T) {
	t.Parallel()
	const delay = 200 * time.Millisecond
	addrs, stop, err := start(poolSpec{name: "app", endpoints: []endpoint{
		{addr: "127.0.0.1:0"}, {addr: "127.0.0.1:0", delay: delay},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	get := func(addr string) (int, string, http.Header, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), resp.Header, time.Since(start)
	}
	for i, addr := range addrs {
		code, body, h, took := get(addr)
		if code != 200 || body != "pool=app endpoint="+addr+" generation= path=/x\n" || h.Get("X-Endpoint") != addr || h.Get("X-Pool") != "app" {
			t.Errorf("endpoint %d: %d %q X-Endpoint %q, want 200 naming %s", i, code, body, h.Get("X-Endpoint"), addr)
		}
		if slow := i == 1; slow != (took >= delay) {
			t.Errorf("endpoint %d answered in %v; delayed: %v", i, took, slow)
		}
	}

	// POST /fail to the slow endpoint sets the whole pool's rate.
	resp, err := http.Post("http://"+addrs[1]+"/fail?rate=1", "text/plain", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for i, addr := range addrs {
		if code, _, _, _ := get(addr); code != http.StatusInternalServerError {
			t.Errorf("endpoint %d after /fail?rate=1: %d, want 500", i, code)
		}
	}
}
