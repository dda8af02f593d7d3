package api

import (
	"net/http"

	"github.com/dwara/dwara/db"
)

// GatewayList is every known data-plane instance.
type GatewayList struct {
	Items []db.GatewayInstance `json:"items"`
}

// listGateways answers GET /api/v1/gateways.
func (s *Server) listGateways(w http.ResponseWriter, r *http.Request) {
	gws, err := s.store.ListGateways(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if gws == nil {
		gws = []db.GatewayInstance{}
	}
	s.writeJSON(w, r, http.StatusOK, GatewayList{Items: gws})
}
