package api

import (
	"net/http"
	"strconv"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// listExposures answers GET /api/v1/exposures: one page of exposure
// records, newest first, optionally of one service, generation, branch and
// reason.
func (s *Server) listExposures(w http.ResponseWriter, r *http.Request) {
	limit, before, err := parsePage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	f := db.ExposureFilter{Service: q.Get("service"), Branch: q.Get("branch"), Reason: q.Get("reason")}
	for _, p := range []struct{ name, value string }{{"service", f.Service}, {"branch", f.Branch}} {
		if fault := textFault(p.value); fault != "" {
			s.writeError(w, r, fieldProblem(http.StatusBadRequest, p.name, "%s", fault))
			return
		}
	}
	switch f.Reason {
	case "", apiv1.ExposureSticky, apiv1.ExposureRequest, apiv1.ExposureForced:
	default:
		s.writeError(w, r, fieldProblem(http.StatusBadRequest, "reason", "must be sticky, request or forced"))
		return
	}
	if v := q.Get("generation"); v != "" || q.Has("generation") {
		if f.Generation, err = parseID("generation", v); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	items, err := s.store.ListExposures(r.Context(), f, limit+1, before)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	page := apiv1.ExposureList{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		page.NextCursor = strconv.FormatInt(items[limit-1].ID, 10)
	}
	if page.Items == nil {
		page.Items = []apiv1.Exposure{}
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// exposureSummary answers GET /api/v1/exposures/summary?service=: the
// service's stored exposures counted per generation and branch, and per
// reason.
func (s *Server) exposureSummary(w http.ResponseWriter, r *http.Request) {
	service := r.URL.Query().Get("service")
	if service == "" {
		s.writeError(w, r, fieldProblem(http.StatusBadRequest, "service", "is required"))
		return
	}
	if fault := textFault(service); fault != "" {
		s.writeError(w, r, fieldProblem(http.StatusBadRequest, "service", "%s", fault))
		return
	}
	sum, err := s.store.SummarizeExposures(r.Context(), service)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, sum)
}
