package api

import (
	"context"
	"net/http"
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

// listGateways answers GET /api/v1/gateways: the live instances, or with
// ?all=true the stale ones too (marked so).
func (s *Server) listGateways(w http.ResponseWriter, r *http.Request) {
	all := false
	switch v := r.URL.Query().Get("all"); v {
	case "", "false":
	case "true":
		all = true
	default:
		s.writeError(w, r, fieldProblem(http.StatusBadRequest, "all", "must be true or false, not %q", v))
		return
	}
	gws, err := s.store.ListGateways(r.Context(), all)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if gws == nil {
		gws = []apiv1.GatewayInstance{}
	}
	s.writeJSON(w, r, http.StatusOK, apiv1.GatewayList{Items: gws})
}

// DefaultGatewayRetention is Options.GatewayRetention's default.
const DefaultGatewayRetention = 24 * time.Hour

// gatewayPruneEvery is how often Run prunes gateway instances.
const gatewayPruneEvery = time.Minute

// pruneGateways deletes, at start and then every gatewayPruneEvery until
// ctx is done, the gateway instances not heard of for gatewayRetention.
func (s *Server) pruneGateways(ctx context.Context) {
	t := time.NewTicker(gatewayPruneEvery)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, s.dbTimeout)
		n, err := s.store.PruneGateways(pctx, s.gatewayRetention)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("prune gateway instances", "err", err)
		case n > 0:
			s.log.Info("pruned gateway instances not heard of", "count", n, "retention", s.gatewayRetention)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
