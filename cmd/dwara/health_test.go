package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dwara/dwara/internal/testnet"
)

// TestHealth runs `dwara health` against a server whose /healthz answers
// 200 and then 503, and against a closed port.
func TestHealth(t *testing.T) {
	t.Parallel()
	var status atomic.Int32
	status.Store(http.StatusOK)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" || r.Header.Get("User-Agent") != "dwara-health" {
			http.Error(w, "not the health check", http.StatusNotFound)
			return
		}
		w.WriteHeader(int(status.Load()))
		w.Write([]byte(`{"status":"ok","version":"v1"}` + "\n"))
	}))
	t.Cleanup(srv.Close)

	for _, url := range []string{srv.URL, srv.URL + "/", srv.URL + "/healthz"} {
		code, out, errOut := runBinary(t, nil, "health", "--url", url)
		if code != 0 || out != `{"status":"ok","version":"v1"}`+"\n" || errOut != "" {
			t.Errorf("health --url %s: exit %d, stdout %q, stderr %q; want exit 0 and the answer", url, code, out, errOut)
		}
	}
	status.Store(http.StatusServiceUnavailable)
	code, out, errOut := runBinary(t, nil, "health", "--url", srv.URL)
	if want := "dwara health: " + srv.URL + "/healthz: answered 503 Service Unavailable: "; code != 1 || out != "" || !strings.HasPrefix(errOut, want) {
		t.Errorf("health of a 503: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}
	closed := "http://" + testnet.ClosedAddr(t)
	code, out, errOut = runBinary(t, nil, "health", "--url", closed)
	if code != 1 || out != "" || !strings.Contains(errOut, "connection refused") {
		t.Errorf("health of a closed port: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
