package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testrun"
)

// cacheOrigin starts an upstream on 127.0.0.1 whose every answer is
// cacheable for ten minutes and names its path and a serial number.
func cacheOrigin(t *testing.T) (addr string, served *atomic.Int64) {
	t.Helper()
	served = new(atomic.Int64)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := served.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "path=%s n=%d\n", r.URL.Path, n)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().String(), served
}

// cachedSpec routes web on "/" to the origin at addr, with a cache.
func cachedSpec(addr string) json.RawMessage {
	return spectest.New().Upstream("origin", addr).Route("web", "/", "origin").Edit(func(s *config.Spec) {
		s.Services[0].Cache = &config.Cache{MaxBytes: 1 << 20}
	}).JSON()
}

// xCache sends GET path through the proxy at addr and returns its
// X-Cache.
func xCache(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := httpc.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", addr, path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s", addr, path, resp.Status)
	}
	return resp.Header.Get("X-Cache")
}

// TestCachePurgeReachesEveryGateway: serve, a database replica and a
// gateway fed by the control plane each hold cached pages (a HIT on the
// second request to each); POST .../cache/purge with a path_prefix makes
// the next request under it a MISS on every gateway and leaves the other
// paths cached; a purge without one empties every gateway; and a
// listener reconnect (every listener backend killed) purges every cache,
// since a purge sent meanwhile would have been missed.
func TestCachePurgeReachesEveryGateway(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	origin, _ := cacheOrigin(t)
	srv := startServe(t, ServeConfig{DatabaseURL: url})
	replica := startGateway(t, GatewayConfig{DatabaseURL: url})
	cp := startGateway(t, GatewayConfig{ControlPlane: "http://" + srv.Admin})
	g := publish(t, srv.Admin, cachedSpec(origin))
	gateways := map[string]*proc{"serve": srv, "replica": replica, "control-plane gateway": cp}
	for _, p := range gateways {
		p.waitApplied(t, g.ID)
		p.waitCachesReset(t) // else its first connect may empty the caches filled below
	}

	// fill caches path on every gateway: a MISS (or a HIT, when it is
	// still cached) and then a HIT.
	fill := func(path string) {
		t.Helper()
		for who, p := range gateways {
			xCache(t, p.Proxy, path)
			if got := xCache(t, p.Proxy, path); got != "HIT" {
				t.Fatalf("%s: the second GET %s is %q, want HIT", who, path, got)
			}
		}
	}
	// missedOnEach waits until the next request to path is a MISS on
	// every gateway.
	missedOnEach := func(what, path string) {
		t.Helper()
		for who, p := range gateways {
			testrun.Eventually(t, fmt.Sprintf("%s: GET %s a MISS after %s", who, path, what), func() bool {
				return xCache(t, p.Proxy, path) == "MISS"
			})
		}
	}
	purge := func(body any) apiv1.CachePurge {
		t.Helper()
		var out apiv1.CachePurge
		if resp := call(t, http.MethodPost, "http://"+srv.Admin+"/api/v1/services/web/cache/purge", body, &out); resp.StatusCode != http.StatusOK {
			t.Fatalf("purge: status %d", resp.StatusCode)
		}
		if !out.Notified || out.Generation != g.ID {
			t.Errorf("purge answered %+v, want notified in generation %d", out, g.ID)
		}
		return out
	}

	fill("/a/page")
	fill("/b/page")
	if out := purge(map[string]any{"path_prefix": "/a/"}); out.Removed != 1 || out.PathPrefix != "/a/" {
		t.Errorf("purge of /a/ answered %+v, want serve's one entry removed", out)
	}
	missedOnEach("the purge of /a/", "/a/page")
	for who, p := range gateways {
		if got := xCache(t, p.Proxy, "/b/page"); got != "HIT" {
			t.Errorf("%s: GET /b/page after the purge of /a/ is %q, want HIT (outside the prefix)", who, got)
		}
	}

	fill("/a/page")
	purge(map[string]any{})
	missedOnEach("the purge of the whole cache", "/b/page")
	missedOnEach("the purge of the whole cache", "/a/page")

	// A reconnect purges: whatever was sent meanwhile was missed.
	fill("/c/page")
	if killed := dbtest.KillListeners(t, url); killed != 2 {
		t.Fatalf("terminated %d listener backends, want serve's and the replica's", killed)
	}
	missedOnEach("the listeners reconnected", "/c/page")
}
