package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// actionCachePurge is the audit action of a cache purge, which publishes
// no generation.
const actionCachePurge = "cache_purge"

// maxPurgePrefix bounds a purge's path_prefix.
const maxPurgePrefix = 1024

// purgeCache answers POST /api/v1/services/{name}/cache/purge: the
// response cache of the service {name} of the active generation is
// emptied in the processes Options.PurgeCache reaches, or only its
// entries under path_prefix. 404 for a service the active generation does
// not have, 409 for one without cache:, 422 for a bad path_prefix.
func (s *Server) purgeCache(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name, err := serviceName(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	note(r, "service", name)
	var req apiv1.CachePurgeRequest
	if err := readJSON(r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Message != "" {
		note(r, "message", req.Message)
	}
	if err := checkMessage(req.Message); err != nil {
		s.writeError(w, r, err)
		return
	}
	if p := req.PathPrefix; p != "" {
		note(r, "path_prefix", p)
		switch {
		case !strings.HasPrefix(p, "/"):
			s.writeError(w, r, fieldProblem(http.StatusUnprocessableEntity, "path_prefix", "must start with /, got %q", p[:min(len(p), 64)]))
			return
		case len(p) > maxPurgePrefix:
			s.writeError(w, r, fieldProblem(http.StatusUnprocessableEntity, "path_prefix", "must be at most %d characters, got %d", maxPurgePrefix, len(p)))
			return
		case strings.ContainsFunc(p, func(c rune) bool { return c < ' ' || c == 0x7f }):
			s.writeError(w, r, fieldProblem(http.StatusUnprocessableEntity, "path_prefix", "must not hold control characters"))
			return
		}
	}
	cur, err := s.store.Current(ctx)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			err = noGenerationYet(name)
		}
		s.writeError(w, r, err)
		return
	}
	spec, err := decodeSpec(cur)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	svc, _ := spec.Service(name)
	if svc == nil {
		s.writeError(w, r, unknownService(name, spec.NearestService(name), cur.ID))
		return
	}
	if svc.Cache == nil {
		s.writeError(w, r, problemf(http.StatusConflict, "service %q has no cache in generation %d; add cache: to cache its answers", name, cur.ID))
		return
	}
	removed := 0
	if s.purger != nil {
		removed = s.purger(name, req.PathPrefix)
	}
	note(r, "removed", removed)
	if req.Message == "" {
		note(r, "message", fmt.Sprintf("purge cache of %s", name))
	}
	s.writeJSON(w, r, http.StatusOK, apiv1.CachePurge{Service: name, PathPrefix: req.PathPrefix, Generation: cur.ID, Removed: removed})
}
