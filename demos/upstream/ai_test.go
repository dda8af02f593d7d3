package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseAI(t *testing.T) {
	t.Parallel()
	s, err := parseAI("flaky=127.0.0.1:0?fail=0.3&ratelimit=0.1&ttft=250ms&seed=9")
	if err != nil {
		t.Fatal(err)
	}
	if s.name != "flaky" || s.addr != "127.0.0.1:0" || s.o.Name != "flaky" || s.o.FailRate != 0.3 || s.o.RateLimitRate != 0.1 || s.o.TTFT != 250*time.Millisecond || s.o.Seed != 9 {
		t.Errorf("parseAI = %+v", s)
	}
	if s, err := parseAI("stable=[::1]:0"); err != nil || s.o.FailRate != 0 || s.o.Seed != 1 {
		t.Errorf("parseAI(stable) = %+v, %v; want no failures, seed 1", s, err)
	}
	for _, bad := range []string{
		"", "x", "=127.0.0.1:0", "x=", "x=10.0.0.1:80", "x=localhost:80", "x=127.0.0.1:0?fail=2",
		"x=127.0.0.1:0?fail=-0.1", "x=127.0.0.1:0?ratelimit=half", "x=127.0.0.1:0?ttft=soon", "x=127.0.0.1:0?ttft=2m",
		"x=127.0.0.1:0?seed=-1", "x=127.0.0.1:0?colour=red", "x=127.0.0.1:0?fail=0.6&ratelimit=0.6",
	} {
		if _, err := parseAI(bad); err == nil {
			t.Errorf("parseAI(%q) accepted", bad)
		}
	}
}

// TestStartAI checks that a fake model upstream answers a chat naming the
// model asked for, and that ratelimit=1 answers 429.
func TestStartAI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag string
		code int
	}{
		{"stable=127.0.0.1:0", http.StatusOK},
		{"limited=127.0.0.1:0?ratelimit=1", http.StatusTooManyRequests},
		{"broken=127.0.0.1:0?fail=1", http.StatusInternalServerError},
	} {
		s, err := parseAI(tc.flag)
		if err != nil {
			t.Fatal(err)
		}
		addr, stop, err := startAI(s)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m-1","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			stop()
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		stop()
		if resp.StatusCode != tc.code || resp.Header.Get("X-Fake-Model") != "m-1" || resp.Header.Get("X-Fake-Upstream") != s.name {
			t.Errorf("%s: %d %v, want %d naming m-1 and %s", tc.flag, resp.StatusCode, resp.Header, tc.code, s.name)
		}
		if tc.code == http.StatusOK && !strings.Contains(string(b), "data: [DONE]") {
			t.Errorf("%s: streamed answer %q, want it to end with [DONE]", tc.flag, b)
		}
	}
}
