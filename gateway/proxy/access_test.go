package proxy

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// logger.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

// TestAccessLog: with an access log, every answered request has one JSON
// line with its request id, status and, when forwarded, where it went.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
		var buf lockedBuffer
		reg := prometheus.NewRegistry()
		p := New(Options{Metrics: reg, AccessLog: slog.New(slog.NewJSONHandler(&buf, nil))})
		g := &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
		g.apply(t, 1, "upstreams: [{name: a, endpoints: [\""+hostOf(up.URL)+"\"]}]\nservices: [{name: v1, base_path: /v1, upstream: a}]\n")
		get(t, client, g.URL+"/v1/x", map[string]string{"X-Request-Id": "acc-1"})
		get(t, client, g.URL+"/nothing", map[string]string{"X-Request-Id": "acc-2"})
		lines := buf.lines()
		if len(lines) != 2 {
			t.Fatalf("%d access lines, want 2: %q", len(lines), lines)
		}
		var got []map[string]any
		for _, l := range lines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			got = append(got, m)
		}
		if m := got[0]; m["request_id"] != "acc-1" || m["status"] != float64(418) || m["service"] != "v1" || m["upstream"] != "a" ||
			m["endpoint"] != hostOf(up.URL) || m["path"] != "/v1/x" || m["method"] != "GET" {
			t.Errorf("forwarded request's line: %v", m)
		}
		if m := got[1]; m["request_id"] != "acc-2" || m["status"] != float64(404) || m["service"] != nil {
			t.Errorf("unmatched request's line: %v", m)
		}
	})
}
