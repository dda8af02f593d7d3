package main

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"127.0.0.1:18101": true, "[::1]:18101": true,
		"0.0.0.0:18101": false, "10.0.0.1:80": false, "localhost:80": false, ":80": false, "127.0.0.1:0": false, "127.0.0.1": false,
	} {
		if err := checkListen(addr); (err == nil) != ok {
			t.Errorf("checkListen(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}

func TestHandlerCountsBenchmarkRequests(t *testing.T) {
	t.Parallel()
	h := handler("canary", "127.0.0.1:18103")
	do := func(method, path, body string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w
	}
	for range 3 {
		if w := do("GET", "/", ""); w.Code != 200 || w.Header().Get("X-Pool") != "canary" || w.Header().Get("X-Upstream") != "127.0.0.1:18103" {
			t.Fatalf("GET / = %d %v", w.Code, w.Header())
		}
	}
	if w := do("GET", "/bytes/16384", ""); w.Code != 200 || w.Body.Len() != 16384 || w.Header().Get("Content-Length") != "16384" ||
		w.Header().Get("X-Pool") != "canary" {
		t.Errorf("GET /bytes/16384 = %d, %d bytes, %v", w.Code, w.Body.Len(), w.Header())
	}
	if w := do("GET", "/bytes/0", ""); w.Code != 200 || w.Body.Len() != 0 {
		t.Errorf("GET /bytes/0 = %d, %d bytes", w.Code, w.Body.Len())
	}
	if w := do("GET", "/bytes/1024", ""); w.Header().Get("Cache-Control") != "" {
		t.Errorf("GET /bytes/1024 is cacheable: Cache-Control %q", w.Header().Get("Cache-Control"))
	}
	for _, k := range []string{"1", "2"} {
		if w := do("GET", "/cache/1024?k="+k, ""); w.Code != 200 || w.Body.Len() != 1024 || w.Header().Get("Content-Length") != "1024" ||
			w.Header().Get("Cache-Control") != "public, max-age=3600" || w.Header().Get("X-Pool") != "canary" {
			t.Errorf("GET /cache/1024?k=%s = %d, %d bytes, %v", k, w.Code, w.Body.Len(), w.Header())
		}
	}
	if w := do("POST", "/", strings.Repeat("x", 4096)); w.Code != 200 || w.Header().Get("X-Pool") != "canary" ||
		!strings.HasPrefix(w.Body.String(), "pool=canary") {
		t.Errorf("POST / = %d %q", w.Code, w.Body.String())
	}
	// not counted:
	for _, path := range []string{"/bytes/x", "/bytes/-1", "/bytes/16777217", "/cache/x", "/cache/16777217", "/healthz", "/nothing"} {
		do("GET", path, "")
	}
	do("PUT", "/", "x")
	body, _ := io.ReadAll(do("GET", "/stats", "").Body)
	if got := strings.TrimSpace(string(body)); got != "9" {
		t.Errorf("/stats = %q, want 9 (3 GET /, 3 /bytes/N, 2 /cache/N, 1 POST /)", got)
	}
}
