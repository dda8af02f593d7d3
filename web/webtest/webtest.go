// Package webtest drives headless Chromium for the browser tests of the
// pages the admin listener serves (the API docs in package web, the
// dashboard in package node): it starts the browser, records what a tab
// requests and which scripts fail, and takes screenshots.
//
// It is meant for tests only; nothing in the product imports it.
package webtest

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// ChromiumPath is the browser the tests drive: Debian's headless Chromium
// (apt-get install -y chromium).
const ChromiumPath = "/usr/bin/chromium"

const (
	// BrowserTimeout bounds a whole browser session, start to close.
	BrowserTimeout = 3 * time.Minute
	// closeTimeout bounds the graceful close of the browser.
	closeTimeout = 10 * time.Second
)

// RequireChromium skips t when ChromiumPath is missing, saying how to
// install it, except under CI (CI set), where it fails t instead.
func RequireChromium(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(ChromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the browser test needs %s (%v): CI must run apt-get install -y chromium", ChromiumPath, err)
		}
		t.Skipf("the browser test needs %s (%v); install it with apt-get install -y chromium", ChromiumPath, err)
	}
}

// StartBrowser starts headless Chromium with a fresh profile and a window
// of width x height, and returns the context of its first tab. The browser
// closes when the test ends, and within BrowserTimeout in any case.
func StartBrowser(t testing.TB, width, height int) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(ChromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.WindowSize(width, height),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		// No UserDataDir option: the allocator then starts the browser on a
		// fresh temporary --user-data-dir, and on exit kills what is left of
		// the browser in it and removes it.
	)
	root, cancelRoot := context.WithTimeout(context.Background(), BrowserTimeout)
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
		t.Fatalf("start %s: %v", ChromiumPath, err)
	}
	return ctx
}

// ScreenshotDir returns dir, created if needed, or a temporary directory of
// t when dir is "" (the value of a test's screenshots flag).
func ScreenshotDir(t testing.TB, dir string) string {
	t.Helper()
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create the screenshot directory: %v", err)
	}
	return dir
}

// Screenshot saves a PNG of the tab as dir/name.png (spaces in name become
// dashes): the whole page when full, else the viewport. It checks that the
// image has more than one colour, and returns its path ("" after a failure,
// which fails t).
func Screenshot(ctx context.Context, t testing.TB, dir, name string, full bool) string {
	t.Helper()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	buf, err := chromedp.Run(ctx, shot)
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
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Errorf("save the screenshot: %v", err)
		return ""
	}
	return path
}

// PageEvents records what a tab does: the URLs it requests, the responses
// that are errors, the loads that fail, script exceptions, console errors
// and the browser's own error reports (such as a Content-Security-Policy
// violation). Record is called by chromedp's reader of the tab; the test
// reads under mu.
type PageEvents struct {
	mu         sync.Mutex
	requests   []string
	failures   []failure // error responses and failed loads
	exceptions []string  // uncaught exceptions, console.error calls, browser errors
	urls       map[network.RequestID]string
}

// failure is an error response (status set) or a failed load.
type failure struct {
	url    string
	status int
	text   string
}

// Listen makes p record the events of the tab of ctx. Call it before the
// tab navigates.
func (p *PageEvents) Listen(t testing.TB, ctx context.Context) {
	t.Helper()
	if err := chromedp.Listen(ctx, p.Record); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
}

// Record handles one event of the tab. It returns at once, as
// chromedp.Listen requires.
func (p *PageEvents) Record(ev any) {
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
			p.failures = append(p.failures, failure{url: ev.Response.URL, status: int(ev.Response.Status),
				text: fmt.Sprintf("%s: status %d", ev.Response.URL, ev.Response.Status)})
		}
	case *network.EventLoadingFailed:
		if !ev.Canceled {
			u := p.urls[ev.RequestID]
			p.failures = append(p.failures, failure{url: u, text: fmt.Sprintf("%s: %s %s", u, ev.ErrorText, ev.BlockedReason)})
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
	case *log.EventEntryAdded:
		// Network errors are failures above already (and may be
		// expected); the rest, such as a CSP violation, is a page error.
		if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
			p.exceptions = append(p.exceptions, fmt.Sprintf("browser %s error: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

// Requests returns the URLs the tab requested so far, in order.
func (p *PageEvents) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requests)
}

// Count returns how many requests of the tab had path as their URL's path.
func (p *PageEvents) Count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, raw := range p.requests {
		if u, err := url.Parse(raw); err == nil && u.Path == path {
			n++
		}
	}
	return n
}

// Check fails t for every request to a host other than host (the page must
// load nothing from outside the binary), every error response and failed
// load, and every script error. It also fails t when no request was seen
// for one of paths, so that a recorder that sees nothing cannot pass.
func (p *PageEvents) Check(t testing.TB, host string, paths ...string) {
	t.Helper()
	p.CheckAllowing(t, host, nil, paths...)
}

// CheckAllowing is Check, except that error responses for which allowed
// returns true are expected.
func (p *PageEvents) CheckAllowing(t testing.TB, host string, allowed func(u *url.URL, status int) bool, paths ...string) {
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
	for _, path := range paths {
		if !slices.ContainsFunc(p.requests, func(raw string) bool {
			u, err := url.Parse(raw)
			return err == nil && u.Path == path
		}) {
			t.Errorf("no request for %s was seen; requests: %q", path, p.requests)
		}
	}
	for _, f := range p.failures {
		if u, err := url.Parse(f.url); err == nil && f.status != 0 && allowed != nil && allowed(u, f.status) {
			continue
		}
		t.Errorf("failed load: %s", f.text)
	}
	for _, e := range p.exceptions {
		t.Errorf("script error: %s", e)
	}
}
