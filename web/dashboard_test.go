package web

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/openapi"
)

// securityHeaders are the headers of every answer of Dashboard.
var securityHeaders = map[string]string{
	"Content-Security-Policy": DashboardCSP,
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"X-Frame-Options":         "DENY",
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	h := Dashboard()
	tests := []struct {
		name, method, path string
		status             int
		contentType        string
		contains           string
	}{
		{"page", "GET", "/", 200, "text/html; charset=utf-8", `<script type="module" src="/ui/app.js"></script>`},
		{"page HEAD", "HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"app", "GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", "render("},
		{"api client", "GET", "/ui/api.js", 200, "text/javascript; charset=utf-8", "X-Dwara-Actor"},
		{"chart", "GET", "/ui/chart.js", 200, "text/javascript; charset=utf-8", "CanaryChart"},
		{"stylesheet", "GET", "/ui/app.css", 200, "text/css; charset=utf-8", ":focus-visible"},
		{"vendored module", "GET", "/ui/vendor/htm-preact-standalone.module.js", 200, "text/javascript; charset=utf-8", "useState"},
		{"license", "GET", "/ui/vendor/preact.LICENSE", 200, "text/plain; charset=utf-8", "MIT"},
		{"icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"missing asset", "GET", "/ui/nope.js", 404, "", ""},
		{"asset directory", "GET", "/ui/", 404, "", ""},
		{"page under /ui/", "GET", "/ui/index.html", 404, "", ""},
		{"another path", "GET", "/elsewhere", 404, "", ""},
		{"POST", "POST", "/", 405, "", ""},
		{"DELETE asset", "DELETE", "/ui/app.js", 405, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.status {
				t.Fatalf("%s %s: status %d, want %d", tt.method, tt.path, rec.Code, tt.status)
			}
			for k, want := range securityHeaders {
				if got := rec.Header().Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			if tt.status == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("405 with Allow %q, want GET, HEAD", rec.Header().Get("Allow"))
			}
			if tt.status != 200 {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != tt.contentType {
				t.Errorf("Content-Type %q, want %q", ct, tt.contentType)
			}
			if cc := rec.Header().Get("Cache-Control"); cc != "no-cache" {
				t.Errorf("Cache-Control %q, want no-cache", cc)
			}
			if tt.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD answered a body of %d bytes", len(body))
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("body lacks %q: %.200s", tt.contains, body)
			}
		})
	}
}

// TestDashboardRevalidates: an asset is answered 304 while its ETag holds.
func TestDashboardRevalidates(t *testing.T) {
	t.Parallel()
	h := Dashboard()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/app.js", nil))
	etag := rec.Header().Get("ETag")
	if !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(etag) {
		t.Fatalf("ETag %q", etag)
	}
	req := httptest.NewRequest("GET", "/ui/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Errorf("If-None-Match %s: status %d with %d bytes, want 304 and none", etag, rec.Code, rec.Body.Len())
	}
}

// TestDashboardMounts mounts the handler the way the admin listener does:
// the page at exactly "/" and the assets under "/ui/", the rest elsewhere.
func TestDashboardMounts(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", Dashboard())
	mux.Handle("GET /ui/", Dashboard())
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for path, want := range map[string]int{"/": 200, "/ui/app.js": 200, "/ui/missing": 404, "/api/v1/generations": 418, "/docs": 418} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: status %d, want %d", path, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("HEAD", "/", nil))
	if rec.Code != 200 {
		t.Errorf("HEAD /: status %d, want 200", rec.Code)
	}
}

// uiFile returns the embedded file ui/name.
func uiFile(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(uiFiles, "ui/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// uiScripts returns the names of the embedded scripts, vendored ones
// included.
func uiScripts(t *testing.T) []string {
	t.Helper()
	var names []string
	err := fs.WalkDir(uiFiles, "ui", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(name, ".js") || strings.HasSuffix(name, ".mjs")) {
			names = append(names, strings.TrimPrefix(name, "ui/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDashboardSelfContained reads the page and its scripts: no inline
// script or style (the CSP would refuse them), nothing from another origin,
// no eval, and every module import names an embedded file.
func TestDashboardSelfContained(t *testing.T) {
	t.Parallel()
	page := uiFile(t, "index.html")
	for _, tag := range regexp.MustCompile(`<script[^>]*>[^<]*</script>`).FindAllString(page, -1) {
		if !regexp.MustCompile(`^<script[^>]* src="/ui/[^"]+"[^>]*></script>$`).MatchString(tag) {
			t.Errorf("index.html has %q: only scripts from /ui/, with no inline code, may run under its CSP", tag)
		}
	}
	for _, bad := range []*regexp.Regexp{
		regexp.MustCompile(`<style`),
		regexp.MustCompile(`\sstyle=`),
		regexp.MustCompile(`\son[a-z]+=`),
		regexp.MustCompile(`(?:src|href)="(?:https?:)?//`),
	} {
		if m := bad.FindString(page); m != "" {
			t.Errorf("index.html has %q, which the page's CSP or its rule of no outside resource forbids", m)
		}
	}
	importRE := regexp.MustCompile(`(?m)(?:^|[;}\s])(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]`)
	for _, name := range uiScripts(t) {
		src := uiFile(t, name)
		for _, bad := range []string{"eval(", "new Function", "document.write", "innerHTML", "http://", "https://"} {
			if strings.Contains(src, bad) && !strings.HasPrefix(name, "vendor/") {
				t.Errorf("%s uses %s", name, bad)
			}
		}
		if strings.Contains(src, "eval(") || strings.Contains(src, "new Function") {
			t.Errorf("%s evaluates strings as code, which the CSP refuses", name)
		}
		for _, m := range importRE.FindAllStringSubmatch(src, -1) {
			spec := m[1] + m[2]
			if !strings.HasPrefix(spec, "./") && !strings.HasPrefix(spec, "../") {
				t.Errorf("%s imports %q: only files of the dashboard may be imported", name, spec)
				continue
			}
			target := path.Join(path.Dir(name), spec)
			if _, err := fs.Stat(uiFiles, "ui/"+target); err != nil {
				t.Errorf("%s imports %q: %v", name, spec, err)
			}
		}
	}
}

// TestDashboardCallsDocumentedPaths checks every API path the scripts call
// against openapi.yaml, a ${...} in the script matching any {parameter}.
func TestDashboardCallsDocumentedPaths(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(openapi.Spec, &doc); err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	param := regexp.MustCompile(`\{[^}]*\}`)
	documented := map[string]bool{}
	for p := range doc.Paths {
		documented[param.ReplaceAllString(p, "{}")] = true
	}
	pathRE := regexp.MustCompile("['\"`](/api/v1/[^'\"`?]*)")
	expr := regexp.MustCompile(`\$\{[^}]*\}`)
	var called []string
	for _, name := range uiScripts(t) {
		for _, m := range pathRE.FindAllStringSubmatch(uiFile(t, name), -1) {
			p := expr.ReplaceAllString(m[1], "{}")
			called = append(called, p)
			if !documented[p] {
				t.Errorf("%s calls %s, which openapi.yaml does not document", name, m[1])
			}
		}
	}
	for _, want := range []string{"/api/v1/generations/current", "/api/v1/events", "/api/v1/services/{}/flip",
		"/api/v1/services/{}/weights", "/api/v1/generations/{}/rollback", "/api/v1/canary/events", "/api/v1/audit",
		"/api/v1/exposures/summary"} {
		if !slices.Contains(called, want) {
			t.Errorf("the scripts never call %s; calls: %q", want, called)
		}
	}
}

// TestThirdParty checks that every vendored file is named in THIRD_PARTY.md
// with its SHA-256, and has its licenses next to it.
func TestThirdParty(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("THIRD_PARTY.md")
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([0-9a-f]{64})  (ui/\S+)$`).FindAllStringSubmatch(string(doc), -1) {
		sums[m[2]] = m[1]
	}
	entries, err := fs.ReadDir(uiFiles, "ui/vendor")
	if err != nil {
		t.Fatal(err)
	}
	vendored := 0
	for _, e := range entries {
		name := "ui/vendor/" + e.Name()
		if strings.HasSuffix(name, ".LICENSE") {
			if !strings.Contains(string(doc), "`"+name+"`") {
				t.Errorf("THIRD_PARTY.md does not name %s", name)
			}
			continue
		}
		vendored++
		body, _ := fs.ReadFile(uiFiles, name)
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); sums[name] != got {
			t.Errorf("%s has SHA-256 %s; THIRD_PARTY.md says %q", name, got, sums[name])
		}
	}
	if vendored == 0 {
		t.Error("no vendored file seen")
	}
	for _, license := range []string{"ui/vendor/htm.LICENSE", "ui/vendor/preact.LICENSE"} {
		if _, err := fs.Stat(uiFiles, license); err != nil {
			t.Errorf("license %s: %v", license, err)
		}
	}
}
