package api

import (
	"net/http"

	"github.com/dwara/dwara/api/apiv1"
)

// listGateways answers GET /api/v1/gateways.
func (s *Server) listGateways(w http.ResponseWriter, r *http.Request) {
	gws, err := s.store.ListGateways(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if gws == nil {
		gws = []apiv1.GatewayInstance{}
	}
	s.writeJSON(w, r, http.StatusOK, apiv1.GatewayList{Items: gws})
}
