package web

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/go-chi/chi/v5"
	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/openapi"
)

// chromiumPath is the browser the browser test drives: Debian's headless
// Chromium (apt-get install -y chromium).
const chromiumPath = "/usr/bin/chromium"

const (
	// browserTimeout bounds the whole browser session, start to close.
	browserTimeout = 2 * time.Minute
	// pageTimeout bounds one page: open the tab, load, render, screenshot.
	pageTimeout = time.Minute
	// renderTimeout bounds the wait for Swagger UI to render the operations.
	renderTimeout = 30 * time.Second
	// closeTimeout bounds the graceful close of the browser.
	closeTimeout = 10 * time.Second
)

var screenshotDir = flag.String("docs.screenshots", "",
	"directory that keeps the screenshots of TestDocsBrowser (default: a temporary directory removed after the test)")

// TestDocsBrowser loads the docs page in a real browser, served the way the
// API serves it, and checks that Swagger UI renders every operation of
// openapi.yaml, that nothing is requested from another host, and that no
// script fails.
func TestDocsBrowser(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the browser test needs %s (%v): CI must run apt-get install -y chromium", chromiumPath, err)
		}
		t.Skipf("the browser test needs %s (%v); install it with apt-get install -y chromium", chromiumPath, err)
	}
	want := specOperations(t)

	srv := httptest.NewServer(docsRoutes())
	t.Cleanup(srv.Close)
	origin, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatalf("parse the test server URL: %v", err)
	}

	browser := startBrowser(t)
	shots := *screenshotDir
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatalf("create the screenshot directory: %v", err)
	}

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

			var seen pageEvents
			if err := chromedp.Listen(ctx, seen.record); err != nil {
				t.Fatalf("open a tab: %v", err)
			}
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
				shot := screenshot(ctx, t, shots, tt.name+"-failed")
				text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
				t.Errorf("Swagger UI rendered no operations within %v: %v\nscreenshot (kept with -docs.screenshots=DIR): %s\npage text: %.1000s",
					renderTimeout, err, shot, text)
				seen.check(t, origin.Host)
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

			shot := screenshot(ctx, t, shots, tt.name)
			t.Logf("screenshot: %s", shot)

			seen.check(t, origin.Host)
		})
	}
}

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

// startBrowser starts headless Chromium with a fresh profile and returns the
// context of its first tab. The browser closes when the test ends.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.WindowSize(1280, 1024),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		// No UserDataDir option: the allocator then starts the browser on a
		// fresh temporary --user-data-dir, and on exit kills what is left of
		// the browser in it and removes it.
	)
	root, cancelRoot := context.WithTimeout(context.Background(), browserTimeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(root, opts...)
	ctx, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(ctx, closeTimeout)
		defer cancel()
		if err := chromedp.Cancel(cctx); err != nil {
			t.Logf("close the browser: %v", err)
		}
		cancelBrowser()
		cancelAlloc() // waits for the browser process to exit
		cancelRoot()
	})
	// The first action starts the browser; its life is bound to ctx.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return ctx
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

// screenshot saves a full-page PNG of the tab as dir/name.png, checks that it
// is an image with more than one colour, and returns its path.
func screenshot(ctx context.Context, t *testing.T, dir, name string) string {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("take a screenshot: %v", err)
		return ""
	}
	img, err := png.Decode(bytes.NewReader(buf))
	if err != nil {
		t.Errorf("decode the screenshot: %v", err)
		return ""
	}
	b := img.Bounds()
	first := img.At(b.Min.X, b.Min.Y)
	blank := true
	for y := b.Min.Y; y < b.Max.Y && blank; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			if img.At(x, y) != first {
				blank = false
				break
			}
		}
	}
	if blank {
		t.Errorf("the screenshot (%dx%d) is blank", b.Dx(), b.Dy())
	}
	path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".png")
	if err := os.WriteFile(path, buf, 0o600); err != nil {
		t.Errorf("save the screenshot: %v", err)
		return ""
	}
	return path
}

// pageEvents records what a tab does: the URLs it requests, the responses
// that are errors, the loads that fail, script exceptions and console
// errors. record is called by chromedp's reader of the tab, the test reads
// under mu.
type pageEvents struct {
	mu         sync.Mutex
	requests   []string
	failures   []string // error responses and failed loads
	exceptions []string // uncaught exceptions and console.error calls
	urls       map[network.RequestID]string
}

// record handles one event of the tab. It returns at once, as chromedp.Listen
// requires.
func (p *pageEvents) record(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		if p.urls == nil {
			p.urls = make(map[network.RequestID]string)
		}
		p.urls[ev.RequestID] = ev.Request.URL
		p.requests = append(p.requests, ev.Request.URL)
	case *network.EventResponseReceived:
		if ev.Response.Status >= http.StatusBadRequest {
			p.failures = append(p.failures, fmt.Sprintf("%s: status %d", ev.Response.URL, ev.Response.Status))
		}
	case *network.EventLoadingFailed:
		if !ev.Canceled {
			p.failures = append(p.failures, fmt.Sprintf("%s: %s %s", p.urls[ev.RequestID], ev.ErrorText, ev.BlockedReason))
		}
	case *runtime.EventExceptionThrown:
		p.exceptions = append(p.exceptions, (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			var args []string
			for _, a := range ev.Args {
				if a.Description != "" {
					args = append(args, a.Description)
				} else {
					args = append(args, string(a.Value))
				}
			}
			p.exceptions = append(p.exceptions, "console.error: "+strings.Join(args, " "))
		}
	}
}

// check fails t for every request to a host other than host (the page must
// load nothing from outside the binary), every failed load and every script
// error. It also makes sure the page's own requests were seen, so that a
// recorder that sees nothing cannot pass.
func (p *pageEvents) check(t *testing.T, host string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.Logf("requests: %q", p.requests)
	for _, raw := range p.requests {
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("request to an unparsable URL %q: %v", raw, err)
			continue
		}
		switch {
		case u.Scheme == "data" || u.Scheme == "blob":
			// Inline, no network.
		case u.Scheme != "http" || u.Host != host:
			t.Errorf("the page requested %s: only the server (http://%s) may be asked", raw, host)
		}
	}
	for _, path := range []string{"/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css", "/openapi.yaml"} {
		if !slices.ContainsFunc(p.requests, func(raw string) bool {
			u, err := url.Parse(raw)
			return err == nil && u.Path == path
		}) {
			t.Errorf("no request for %s was seen; requests: %q", path, p.requests)
		}
	}
	for _, f := range p.failures {
		t.Errorf("failed load: %s", f)
	}
	for _, e := range p.exceptions {
		t.Errorf("script error: %s", e)
	}
}
