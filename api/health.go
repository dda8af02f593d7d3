package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/dwara/dwara/openapi"
)

// readyTimeout bounds the database ping of GET /readyz.
const readyTimeout = 2 * time.Second

// health is the body of a positive health or readiness answer.
type health struct {
	Status string `json:"status"`
	// Version is the build's version (Options.Version), in /healthz
	// answers only.
	Version string `json:"version,omitempty"`
}

// healthz answers GET /healthz: the process is alive, and which build it
// runs.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, health{Status: "ok", Version: s.version})
}

// readyz answers GET /readyz: 200 when the database answers (within the
// smaller of readyTimeout and Options.DatabaseTimeout) and the Ready
// condition holds, else 503 with Retry-After.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), min(readyTimeout, s.dbTimeout))
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "not ready: database ping failed", "request_id", requestID(ctx), "err", err)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		s.writeProblem(w, r, problemf(http.StatusServiceUnavailable, "the database does not answer"))
		return
	}
	if !s.ready() {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		s.writeProblem(w, r, problemf(http.StatusServiceUnavailable, "not ready yet: no generation has been applied"))
		return
	}
	s.writeJSON(w, r, http.StatusOK, health{Status: "ok"})
}

// metrics answers GET /metrics with Options.Metrics, or 404 without one.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.metricsHandler == nil {
		s.writeProblem(w, r, problemf(http.StatusNotFound, "metrics are not enabled"))
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}

// openAPI answers GET /openapi.yaml with the embedded document.
func (s *Server) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", contentYAML)
	w.Header().Set("Cache-Control", "no-cache")
	if _, err := w.Write(openapi.Spec); err != nil {
		s.log.DebugContext(r.Context(), "write openapi.yaml", "request_id", requestID(r.Context()), "err", err)
	}
}

// docs answers GET /docs and /docs/{asset} with the embedded docs page.
func (s *Server) docs(w http.ResponseWriter, r *http.Request) {
	s.docsHandler.ServeHTTP(w, r)
}
