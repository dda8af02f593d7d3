package main

import (
	"io"
	"net/http"
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

func TestHandlerCountsOnlyRoot(t *testing.T) {
	t.Parallel()
	h := handler("canary", "127.0.0.1:18103")
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w
	}
	for range 3 {
		if w := get("/"); w.Code != 200 || w.Header().Get("X-Pool") != "canary" || w.Header().Get("X-Upstream") != "127.0.0.1:18103" {
			t.Fatalf("GET / = %d %v", w.Code, w.Header())
		}
	}
	get("/healthz")
	get("/nothing")
	body, _ := io.ReadAll(get("/stats").Body)
	if got := strings.TrimSpace(string(body)); got != "3" {
		t.Errorf("/stats = %q, want 3", got)
	}
}
