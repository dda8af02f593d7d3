package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
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
// emptied in this process (Options.PurgeCache), or only its entries
// under path_prefix, then the purge is announced on db.CacheNotifyChannel
// to every other gateway; 503 when it cannot be announced. 404 for a service the active generation does
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
	gen, err := s.cachedService(ctx, name)
	if err != nil {
		s.writeError(w, r, err)
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
	// The other gateways: the replicas hear the NOTIFY, the event loop
	// turns it into cache_purged for those fed by the control plane.
	if err := s.store.NotifyCachePurge(ctx, db.CachePurge{Service: name, PathPrefix: req.PathPrefix, Generation: gen}); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, apiv1.CachePurge{Service: name, PathPrefix: req.PathPrefix, Generation: gen, Removed: removed, Notified: true})
}

// cachedService returns the active generation when its service name has
// a cache: an error to answer when there is no generation, no such
// service (404) or one without cache: (409).
func (s *Server) cachedService(ctx context.Context, name string) (int64, error) {
	cur, err := s.store.Current(ctx)
	if err != nil {
		if errors.Is(err, db.ErrNotFound) {
			err = noGenerationYet(name)
		}
		return 0, err
	}
	spec, err := decodeSpec(cur)
	if err != nil {
		return 0, err
	}
	svc, _ := spec.Service(name)
	if svc == nil {
		return 0, unknownService(name, spec.NearestService(name), cur.ID)
	}
	if svc.Cache == nil {
		return 0, problemf(http.StatusConflict, "service %q has no cache in generation %d; add cache: to cache its answers", name, cur.ID)
	}
	return cur.ID, nil
}

// cacheStats answers GET /api/v1/services/{name}/cache: the figures of
// the service's cache in this process's embedded proxy (Options.CacheStats).
// 404 for a service the active generation does not have, 409 for one
// without cache:, 503 while the proxy does not serve it yet.
func (s *Server) cacheStats(w http.ResponseWriter, r *http.Request) {
	name, err := serviceName(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	gen, err := s.cachedService(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var out apiv1.CacheStats
	ok := false
	if s.cacheStatsOf != nil {
		out, ok = s.cacheStatsOf(name)
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		s.writeError(w, r, problemf(http.StatusServiceUnavailable, "this process's proxy does not serve the cache of %q yet (generation %d is not applied here)", name, gen))
		return
	}
	out.Service, out.Generation, out.HitRatio = name, gen, nil
	if n := out.Hits + out.Misses + out.Revalidated; n > 0 {
		ratio := float64(out.Hits+out.Revalidated) / float64(n)
		out.HitRatio = &ratio
	}
	s.writeJSON(w, r, http.StatusOK, out)
}
