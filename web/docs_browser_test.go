package web

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-chi/chi/v5"
	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/openapi"
	"github.com/dwara/dwara/web/webtest"
)

const (
	// pageTimeout bounds one page: open the tab, load, render, screenshot
	// (the browser's own bound, webtest.BrowserTimeout, is the same). A
	// page takes about 8 s on a quiet 2-core machine; beside another suite
	// under the race detector it took over a minute.
	pageTimeout = webtest.BrowserTimeout
	// renderTimeout bounds the wait for Swagger UI to render the operations.
	renderTimeout = 2 * time.Minute
)

var screenshotDir = flag.String("docs.screenshots", "",
	"directory that keeps the screenshots of TestDocsBrowser (default: a temporary directory removed after the test)")

// TestDocsBrowser loads the docs page in a real browser, served the way the
// API serves it, and checks that Swagger UI renders every operation of
// openapi.yaml, that nothing is requested from another host, and that no
// script fails.
func TestDocsBrowser(t *testing.T) {
	t.Parallel()
	webtest.RequireChromium(t)
	want := specOperations(t)

	srv := httptest.NewServer(docsRoutes())
	t.Cleanup(srv.Close)
	origin, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatalf("parse the test server URL: %v", err)
	}

	browser := webtest.StartBrowser(t, 1280, 1024)
	shots := webtest.ScreenshotDir(t, *screenshotDir)

	tests := []struct {
		name, path string
	}{
		{"page", "/docs"},
		{"page with slash", "/docs/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(browser, pageTimeout)
			defer cancel()
			ctx, cancel = chromedp.NewContext(ctx) // a tab of its own
			defer cancel()

			var seen webtest.PageEvents
			seen.Listen(t, ctx)
			resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(srv.URL+tt.path))
			if err != nil {
				t.Fatalf("load %s: %v", tt.path, err)
			}
			if resp.Status != http.StatusOK {
				t.Fatalf("GET %s: status %d, want %d", tt.path, resp.Status, http.StatusOK)
			}

			got, err := chromedp.Run(ctx, chromedp.Poll[[]string](renderedOperations,
				chromedp.WithPollingTimeout(renderTimeout)))
			if err != nil {
				shot := webtest.Screenshot(ctx, t, shots, tt.name+"-failed", true)
				text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Errorf("Swagger UI rendered no operations within %v: %v\nscreenshot (kept with -docs.screenshots=DIR): %s\npage text: %.1000s",
					renderTimeout, err, shot, text)
				seen.Check(t, origin.Host, docsAssets...)
				return
			}
			if missing, extra := diffSorted(want, got); len(missing)+len(extra) > 0 {
				t.Errorf("rendered operations differ from openapi.yaml\nmissing: %q\nextra: %q", missing, extra)
			}

			// The images the page shows have loaded (or failed), so every
			// request of the page has been seen by now.
			if _, err := chromedp.Run(ctx, chromedp.Poll[bool](pageSettled,
				chromedp.WithPollingTimeout(renderTimeout))); err != nil {
				t.Errorf("the page did not finish loading: %v", err)
			}

			title, err := chromedp.Run(ctx, chromedp.Title())
			if err != nil {
				t.Fatalf("read the title: %v", err)
			}
			if !strings.HasPrefix(title, DocsTitle) {
				t.Errorf("title %q, want it to start with %q", title, DocsTitle)
			}
			info, err := chromedp.Run(ctx, chromedp.Evaluate[string](
				`(document.querySelector('#swagger-ui .info .title') || {}).textContent || ''`))
			if err != nil {
				t.Fatalf("read the API title: %v", err)
			}
			if specTitle := specInfoTitle(t); !strings.Contains(info, specTitle) {
				t.Errorf("rendered API title %q, want it to contain %q", info, specTitle)
			}
			errs, err := chromedp.Run(ctx, chromedp.Evaluate[string](
				`Array.from(document.querySelectorAll('#swagger-ui .errors-wrapper')).map(e => e.innerText).join('\n')`))
			if err != nil {
				t.Fatalf("read the errors box: %v", err)
			}
			if errs != "" {
				t.Errorf("Swagger UI reports errors in openapi.yaml:\n%s", errs)
			}

			shot := webtest.Screenshot(ctx, t, shots, tt.name, true)
			t.Logf("screenshot: %s", shot)

			seen.Check(t, origin.Host, docsAssets...)
		})
	}
}

// docsAssets are the paths the docs page must have requested.
var docsAssets = []string{"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/openapi.yaml"}

// docsRoutes serves the docs page and openapi.yaml on the routes, and with the
// headers, of the admin listener (api/routes.go, api/health.go).
func docsRoutes() http.Handler {
	docs := Docs("/openapi.yaml", "/docs/")
	r := chi.NewRouter()
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(openapi.Spec)
	})
	r.Get("/docs", docs.ServeHTTP)
	r.Get("/docs/", docs.ServeHTTP)
	r.Get("/docs/{asset}", docs.ServeHTTP)
	return r
}

// renderedOperations is a JavaScript expression: the sorted "METHOD /path"
// pairs Swagger UI shows, once the page text shows two operations known to be
// in openapi.yaml; null before. Swagger UI puts zero-width spaces before the
// slashes of a path, so the text is read without them.
const renderedOperations = `(() => {
	const text = document.body.innerText.replace(/\u200b/g, '');
	if (!text.includes('/api/v1/generations') || !text.includes('/api/v1/services/{name}/flip')) {
		return null;
	}
	return Array.from(document.querySelectorAll('#swagger-ui .opblock-summary')).map(s => {
		const method = s.querySelector('.opblock-summary-method');
		const path = s.querySelector('.opblock-summary-path');
		if (!method || !path) {
			return '';
		}
		return method.textContent.trim().toUpperCase() + ' ' +
			(path.dataset.path || path.textContent.replace(/\u200b/g, '').trim());
	}).filter(Boolean);
})()`

// pageSettled is a JavaScript expression: the document and every image in it
// have finished loading.
const pageSettled = `document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)`

// specOperations returns the sorted "METHOD /path" pairs of openapi.yaml.
func specOperations(t *testing.T) []string {
	t.Helper()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := yaml.Unmarshal(openapi.Spec, &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	var ops []string
	for path, item := range doc.Paths {
		for method := range item {
			if slices.Contains(methods, method) {
				ops = append(ops, strings.ToUpper(method)+" "+path)
			}
		}
	}
	if len(ops) == 0 {
		t.Fatal("openapi.yaml has no operations")
	}
	slices.Sort(ops)
	return ops
}

// diffSorted compares want, which is sorted, with got, in any order: it
// returns the entries of want missing from got and the entries of got not in
// want. Duplicates count.
func diffSorted(want, got []string) (missing, extra []string) {
	got = slices.Sorted(slices.Values(got))
	i, j := 0, 0
	for i < len(want) || j < len(got) {
		switch {
		case j == len(got) || (i < len(want) && want[i] < got[j]):
			missing = append(missing, want[i])
			i++
		case i == len(want) || got[j] < want[i]:
			extra = append(extra, got[j])
			j++
		default:
			i++
			j++
		}
	}
	return missing, extra
}

// specInfoTitle returns info.title of openapi.yaml.
func specInfoTitle(t *testing.T) string {
	t.Helper()
	var doc struct {
		Info struct {
			Title string `json:"title"`
		} `json:"info"`
	}
	if err := yaml.Unmarshal(openapi.Spec, &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	if doc.Info.Title == "" {
		t.Fatal("openapi.yaml has no info.title")
	}
	return doc.Info.Title
}
