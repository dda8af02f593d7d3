package api

import (
	"net/http"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// diffGeneration answers GET /api/v1/generations/{id}/diff?against=.
func (s *Server) diffGeneration(w http.ResponseWriter, r *http.Request) {
	to, err := s.loadGeneration(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	newSpec, err := decodeSpec(to)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	againstID := to.ParentID
	if v := r.URL.Query().Get("against"); v != "" {
		id, err := parseID("against", v)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		againstID = &id
	}
	oldSpec := &config.Spec{}
	if againstID != nil {
		from, err := s.generation(r, *againstID)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if oldSpec, err = decodeSpec(from); err != nil {
			s.internalError(w, r, err)
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, diffSpecs(againstID, &to.ID, oldSpec, newSpec))
}

// diffSpecs compares old (generation from) with new (generation to): the
// wire form of config.Diff.
func diffSpecs(from, to *int64, old, new *config.Spec) apiv1.Diff {
	cd := config.Diff(old, new)
	d := apiv1.Diff{
		From:        from,
		To:          to,
		Services:    make([]apiv1.ServiceDiff, len(cd.Services)),
		Upstreams:   make([]apiv1.UpstreamDiff, len(cd.Upstreams)),
		CanaryReset: cd.CanaryReset,
	}
	for i, s := range cd.Services {
		mc := make([]apiv1.MatchChange, len(s.MatchChanges))
		for j, c := range s.MatchChanges {
			mc[j] = apiv1.MatchChange{Rule: c.Rule, Change: c.Change, Details: c.Details}
		}
		d.Services[i] = apiv1.ServiceDiff{Name: s.Name, Change: s.Change, Details: s.Details, MovedShare: s.MovedShare,
			MatchesDecide: s.MatchesDecide, MatchChanges: mc}
	}
	for i, u := range cd.Upstreams {
		d.Upstreams[i] = apiv1.UpstreamDiff{Name: u.Name, Change: u.Change, Details: u.Details}
	}
	return d
}
