// Package web holds what the admin listener serves to browsers, embedded in
// the binary so nothing is loaded from outside: the operator's dashboard
// (Dashboard, at "/" and "/ui/") and the API docs page (Docs: Swagger UI
// over /openapi.yaml).
package web

import (
	"net/http"

	"github.com/swaggest/swgui/v5emb"
)

// DocsTitle is the title of the API docs page.
const DocsTitle = "Dwara API"

// Docs returns the handler of the API docs page: Swagger UI 5, whose assets
// are embedded (pre-compressed) in the binary, rendering the OpenAPI document
// at specURL. Mount it at basePath (with a trailing slash, e.g. "/docs/"):
// basePath itself, with or without the slash, serves the page, and
// basePath+"<asset>" the assets. The handler is safe for concurrent use.
func Docs(specURL, basePath string) http.Handler {
	return v5emb.New(DocsTitle, specURL, basePath)
}
