package api

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// TestCachePurge: POST /api/v1/services/{name}/cache/purge reaches the
// process's purge with the service and prefix, answers what it removed,
// and is audited as cache_purge; a service without cache is 409, an
// unknown one 404, a bad path_prefix 422 naming the field.
func TestCachePurge(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var calls []string
	e := newEnv(t, Options{PurgeCache: func(service, prefix string) int {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, service+" "+prefix)
		return 7
	}})
	e.publish(specWith(90, 10).Edit(func(s *config.Spec) {
		svc, _ := s.Service("web")
		svc.Cache = &config.Cache{MaxBytes: 1 << 20}
	}), "")

	var got apiv1.CachePurge
	e.do(call{method: "POST", path: "/api/v1/services/web/cache/purge", body: map[string]any{"path_prefix": "/img/"}}).
		want(t, http.StatusOK).decode(t, &got)
	if got.Service != "web" || got.PathPrefix != "/img/" || got.Removed != 7 || got.Generation != 1 || !got.Notified {
		t.Errorf("purge answer %+v", got)
	}
	e.do(call{method: "POST", path: "/api/v1/services/web/cache/purge"}).want(t, http.StatusOK)
	mu.Lock()
	if strings.Join(calls, ",") != "web /img/,web " {
		t.Errorf("purges reached: %q", calls)
	}
	mu.Unlock()

	e.do(call{method: "POST", path: "/api/v1/services/api/cache/purge"}).want(t, http.StatusConflict)
	e.do(call{method: "POST", path: "/api/v1/services/wbe/cache/purge"}).want(t, http.StatusNotFound)
	p := e.do(call{method: "POST", path: "/api/v1/services/web/cache/purge", body: map[string]any{"path_prefix": "img"}}).
		want(t, http.StatusUnprocessableEntity).problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Path != "path_prefix" || !strings.Contains(p.Errors[0].Message, "must start with /") {
		t.Errorf("bad prefix problem %+v", p)
	}
	n := 0
	for _, a := range e.audit() {
		if a.Action == "cache_purge" {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d cache_purge audit entries, want 5 (accepted and refused)", n)
	}
}

// TestCacheStats: GET /api/v1/services/{name}/cache answers the figures of
// the process's cache with the service, the active generation and the hit
// ratio (hits and revalidated over the cacheable requests; null before
// any); 409 for a service without cache, 404 for an unknown one, 503 when
// the process does not serve the service's cache.
func TestCacheStats(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	stats := map[string]apiv1.CacheStats{}
	e := newEnv(t, Options{CacheStats: func(service string) (apiv1.CacheStats, bool) {
		mu.Lock()
		defer mu.Unlock()
		st, ok := stats[service]
		return st, ok
	}})
	e.publish(specWith(90, 10).Edit(func(s *config.Spec) {
		svc, _ := s.Service("web")
		svc.Cache = &config.Cache{MaxBytes: 1 << 20}
	}), "")
	e.do(call{method: "GET", path: "/api/v1/services/web/cache"}).want(t, http.StatusServiceUnavailable)

	mu.Lock()
	stats["web"] = apiv1.CacheStats{Entries: 2, Bytes: 900, MaxBytes: 1 << 20}
	mu.Unlock()
	var got apiv1.CacheStats
	e.do(call{method: "GET", path: "/api/v1/services/web/cache"}).want(t, http.StatusOK).decode(t, &got)
	if got.Service != "web" || got.Generation != 1 || got.Entries != 2 || got.Bytes != 900 || got.HitRatio != nil {
		t.Errorf("figures before any request %+v, want web of generation 1, 2 entries, 900 bytes, no hit ratio", got)
	}
	mu.Lock()
	stats["web"] = apiv1.CacheStats{Hits: 5, Revalidated: 1, Misses: 2, Bypassed: 10}
	mu.Unlock()
	e.do(call{method: "GET", path: "/api/v1/services/web/cache"}).want(t, http.StatusOK).decode(t, &got)
	if got.HitRatio == nil || *got.HitRatio != 0.75 {
		t.Errorf("hit ratio %v of 5 hits, 1 revalidated, 2 misses (bypass aside), want 0.75", got.HitRatio)
	}
	e.do(call{method: "GET", path: "/api/v1/services/api/cache"}).want(t, http.StatusConflict)
	e.do(call{method: "GET", path: "/api/v1/services/wbe/cache"}).want(t, http.StatusNotFound)
}
