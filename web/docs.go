// Package web holds what the admin listener serves to browsers, embedded in
// the binary so nothing is loaded from outside: the operator's dashboard
// (Dashboard, at "/" and "/ui/") and the API docs page (Docs: Swagger UI
// over /openapi.yaml).
package web

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/swaggest/swgui/v5emb"
)

// DocsTitle is the title of the API docs page.
const DocsTitle = "Dwara API"

// Docs returns the handler of the API docs page: Swagger UI 5, whose assets
// are embedded (pre-compressed) in the binary, rendering the OpenAPI document
// at specURL. Mount it at basePath (with a trailing slash, e.g. "/docs/"):
// basePath itself, with or without the slash, serves the page, and
// basePath+"<asset>" the assets. The handler is safe for concurrent use.
//
// The page itself gets a link back to the dashboard ("/") at its top.
func Docs(specURL, basePath string) http.Handler {
	ui := v5emb.New(DocsTitle, specURL, basePath)
	page := strings.TrimSuffix(basePath, "/")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != page && r.URL.Path != page+"/" && r.URL.Path != page+"/index.html" {
			ui.ServeHTTP(w, r)
			return
		}
		rec := &pageRecorder{header: http.Header{}, code: http.StatusOK}
		ui.ServeHTTP(rec, r)
		body := rec.body.Bytes()
		if rec.code == http.StatusOK && rec.header.Get("Content-Encoding") == "" {
			body = bytes.Replace(body, []byte("<body>"), []byte("<body>"+backLink), 1)
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// backLink is the docs page's way back to the dashboard.
const backLink = `<nav id="dwara-back"><a href="/">&larr; Dwara dashboard</a></nav>`

// pageRecorder keeps the docs page's answer, small and complete, for the
// link to go in.
type pageRecorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (p *pageRecorder) Header() http.Header         { return p.header }
func (p *pageRecorder) WriteHeader(code int)        { p.code = code }
func (p *pageRecorder) Write(b []byte) (int, error) { return p.body.Write(b) }
