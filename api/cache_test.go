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
	if got.Service != "web" || got.PathPrefix != "/img/" || got.Removed != 7 || got.Generation != 1 {
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
