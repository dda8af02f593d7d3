package node

import (
	"strings"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
)

// TestDashboardCache drives the console in headless Chromium against a
// real dwara serve: the card of a service with cache: shows the hit
// ratio, the hits and misses, the bytes and the entries of serve's own
// proxy (one miss and one hit sent before: 50%, one entry); "Purge
// cache" asks first, and once confirmed the card says what the purge
// removed and the cache holds nothing, and the next request through the
// proxy is a MISS.
func TestDashboardCache(t *testing.T) {
	t.Parallel()
	browser, shots := dashboardBrowser(t)

	origin, _ := cacheOrigin(t)
	srv := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	g := publish(t, srv.Admin, cachedSpec(origin))
	srv.waitApplied(t, g.ID)
	srv.waitCachesReset(t) // else its first connect may empty the cache filled below
	if got := xCache(t, srv.Proxy, "/page"); got != "MISS" {
		t.Fatalf("first GET /page is %q, want MISS", got)
	}
	if got := xCache(t, srv.Proxy, "/page"); got != "HIT" {
		t.Fatalf("second GET /page is %q, want HIT", got)
	}

	dash := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, dash)
	card := `document.querySelector('[data-service="web"] [data-cache]')`
	p.waitFor("web's cache figures", card+` && `+card+`.querySelector('[data-cache-stats]')`)
	for attr, want := range map[string]string{
		"data-cache-hit-ratio": "0.5", "data-cache-hits": "1", "data-cache-misses": "1", "data-cache-entries": "1",
	} {
		if got := eval[string](p, card+`.querySelector('[`+attr+`]').getAttribute('`+attr+`')`); got != want {
			t.Errorf("%s = %q, want %q", attr, got, want)
		}
	}
	if n := eval[float64](p, `Number(`+card+`.querySelector('[data-cache-bytes]').dataset.cacheBytes)`); n <= 0 {
		t.Errorf("the cache shows %v bytes for one entry, want more than 0", n)
	}
	text := eval[string](p, card+`.textContent.replace(/\s+/g, ' ')`)
	for _, want := range []string{"50.0% hit ratio", "1 hits", "1 misses", "of 1 MiB", "1 entries"} {
		if !strings.Contains(text, want) {
			t.Errorf("the cache figures read %q, want %q in them", text, want)
		}
	}
	p.screenshot("cache", false)

	p.click(`[data-service="web"] [data-action="purge-cache"]`)
	p.waitFor("the purge's confirmation", `document.querySelector('dialog[open] [data-confirm]')`)
	if got := eval[string](p, `document.querySelector('dialog[open]').textContent`); !strings.Contains(got, "every gateway") {
		t.Errorf("the purge's confirmation says %q; want it to name every gateway", got)
	}
	if got := xCache(t, srv.Proxy, "/page"); got != "HIT" {
		t.Fatalf("GET /page before the purge is confirmed is %q, want HIT", got)
	}
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("the purge's result on the card", card+`.querySelector('[data-cache-purged="1"]')`)
	p.waitFor("the cache empty", card+`.querySelector('[data-cache-entries="0"]')`)
	if got := xCache(t, srv.Proxy, "/page"); got != "MISS" {
		t.Errorf("GET /page after the purge is %q, want MISS", got)
	}
	seen.Check(t, strings.TrimPrefix(dash, "http://"), append(dashboardAssets, "/api/v1/services/web/cache", "/api/v1/services/web/cache/purge")...)
}
