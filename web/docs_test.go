package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func TestDocs(t *testing.T) {
	t.Parallel()
	h := Docs("/openapi.yaml", "/docs/")
	tests := []struct {
		name, path  string
		status      int
		contentType string
		contains    string
	}{
		{"page", "/docs", http.StatusOK, "text/html", `"swaggerJsonUrl":"/openapi.yaml"`},
		{"page with slash", "/docs/", http.StatusOK, "text/html", `<script src="/docs/swagger-ui-bundle.js">`},
		{"bundle", "/docs/swagger-ui-bundle.js", http.StatusOK, "javascript", "SwaggerUIBundle"},
		{"stylesheet", "/docs/swagger-ui.css", http.StatusOK, "text/css", ".swagger-ui"},
		{"missing asset", "/docs/nope.js", http.StatusNotFound, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.Contains(ct, tt.contentType) {
				t.Errorf("Content-Type %q, want %q", ct, tt.contentType)
			}
			if !strings.Contains(string(body), tt.contains) {
				t.Errorf("body lacks %q: %.200s", tt.contains, body)
			}
		})
	}
	// Nothing is loaded from outside the binary.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/docs", nil))
	for _, attr := range []string{`src="http`, `href="http`, `src="//`, `href="//`} {
		if strings.Contains(rec.Body.String(), attr) {
			t.Errorf("the page loads an external resource (%s)", attr)
		}
	}
}

// The docs page links back to the dashboard, with and without the slash;
// its assets are served as they are.
func TestDocsBackLink(t *testing.T) {
	t.Parallel()
	h := Docs("/openapi.yaml", "/docs/")
	for _, path := range []string{"/docs", "/docs/"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || !strings.Contains(body, `<a href="/">&larr; Dwara dashboard</a>`) || !strings.Contains(body, "swagger-ui") {
			t.Errorf("GET %s: %d, no link back to the dashboard in %.300s", path, rec.Code, body)
		}
		if n := rec.Header().Get("Content-Length"); n != strconv.Itoa(len(body)) {
			t.Errorf("GET %s: Content-Length %s for %d bytes", path, n, len(body))
		}
	}
}
