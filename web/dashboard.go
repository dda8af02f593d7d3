package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// The dashboard's files: the page, its scripts and stylesheet, and the
// vendored Preact + htm build with its licenses (THIRD_PARTY.md).
//
//go:embed ui
var uiFiles embed.FS

// Where the dashboard is served: the page at DashboardPath, its assets
// under AssetPrefix.
const (
	DashboardPath = "/"
	AssetPrefix   = "/ui/"
)

// DashboardCSP is the Content-Security-Policy of every answer of
// Dashboard: scripts, styles, connections and images from this origin
// only (images also as data: URLs); no inline script or style.
const DashboardCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'"

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// contentTypes are the media types of the embedded files, by extension;
// others are served as application/octet-stream.
var contentTypes = map[string]string{
	".html":    "text/html; charset=utf-8",
	".js":      "text/javascript; charset=utf-8",
	".mjs":     "text/javascript; charset=utf-8",
	".css":     "text/css; charset=utf-8",
	".svg":     "image/svg+xml",
	".png":     "image/png",
	".LICENSE": "text/plain; charset=utf-8",
	".md":      "text/plain; charset=utf-8",
	".txt":     "text/plain; charset=utf-8",
}

// dashboardAssets maps each served path to its file: DashboardPath to
// ui/index.html, AssetPrefix+"x" to ui/x for every other file.
var dashboardAssets = sync.OnceValue(func() map[string]asset {
	assets := map[string]asset{}
	err := fs.WalkDir(uiFiles, "ui", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := uiFiles.ReadFile(name)
		if err != nil {
			return err
		}
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		a := asset{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		rel := strings.TrimPrefix(name, "ui/")
		if rel == "index.html" {
			assets[DashboardPath] = a
		} else {
			assets[AssetPrefix+rel] = a
		}
		return nil
	})
	if err != nil {
		panic("web: reading the embedded dashboard: " + err.Error()) // the files are in the binary
	}
	return assets
})

// Dashboard returns the handler of the operator's dashboard: the page at
// "/" and its assets under "/ui/" (e.g. "/ui/app.js"), all embedded in the
// binary, for GET and HEAD. The page reads and changes everything through
// the REST API of the same origin (/api/v1/...). Every answer carries a
// strict Content-Security-Policy (DashboardCSP), X-Content-Type-Options:
// nosniff, Referrer-Policy: no-referrer and X-Frame-Options: DENY; assets
// are revalidated (Cache-Control: no-cache) by their ETag. Any other path
// is 404, any other method 405. Mount it as
//
//	mux.Handle("GET /{$}", web.Dashboard())
//	mux.Handle("GET /ui/", web.Dashboard())
//
// The handler is safe for concurrent use.
func Dashboard() http.Handler {
	return http.HandlerFunc(serveDashboard)
}

func serveDashboard(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", DashboardCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := dashboardAssets()[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h.Set("Content-Type", a.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	// ServeContent answers If-None-Match (304), HEAD and ranges.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
