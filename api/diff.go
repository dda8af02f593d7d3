package api

import (
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/split"
)

// Change kinds of a ServiceDiff or UpstreamDiff.
const (
	ChangeAdded     = "added"
	ChangeRemoved   = "removed"
	ChangeModified  = "modified"
	ChangeUnchanged = "unchanged"
)

// Diff compares two specs: the old side From and the new side To.
type Diff struct {
	// From is the old generation; nil for the empty spec (no generation).
	From *int64 `json:"from"`
	// To is the new generation; nil for a proposed spec (a dry run).
	To *int64 `json:"to"`
	// Services lists every service of either side: the new side's in order,
	// then the removed ones.
	Services []ServiceDiff `json:"services"`
	// Upstreams lists every upstream of either side, in the same order.
	Upstreams []UpstreamDiff `json:"upstreams"`
}

// ServiceDiff is what changed in one service.
type ServiceDiff struct {
	Name string `json:"name"`
	// Change is one of the Change* constants.
	Change string `json:"change"`
	// Details lists each change in words, e.g. "weights api-stable 95->90".
	Details []string `json:"details"`
	// MovedShare is the exact share of the service's request keys whose
	// upstream changes (split.Displacement of the two weightings); 1 for an
	// added or removed service.
	MovedShare float64 `json:"moved_share"`
}

// UpstreamDiff is what changed in one upstream.
type UpstreamDiff struct {
	Name string `json:"name"`
	// Change is one of the Change* constants.
	Change string `json:"change"`
	// Details lists each change in words, e.g. "endpoint added 10.0.0.3:80".
	Details []string `json:"details"`
}

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

// diffSpecs compares old (generation from) with new (generation to).
func diffSpecs(from, to *int64, old, new *config.Spec) Diff {
	d := Diff{From: from, To: to, Services: []ServiceDiff{}, Upstreams: []UpstreamDiff{}}
	for i := range new.Services {
		n := &new.Services[i]
		o, _ := old.Service(n.Name)
		if o == nil {
			d.Services = append(d.Services, ServiceDiff{Name: n.Name, Change: ChangeAdded, Details: []string{describeRouting(n)}, MovedShare: 1})
			continue
		}
		d.Services = append(d.Services, diffService(o, n))
	}
	for i := range old.Services {
		o := &old.Services[i]
		if n, _ := new.Service(o.Name); n == nil {
			d.Services = append(d.Services, ServiceDiff{Name: o.Name, Change: ChangeRemoved, Details: []string{"was " + describeRouting(o)}, MovedShare: 1})
		}
	}
	for i := range new.Upstreams {
		n := &new.Upstreams[i]
		o, _ := old.Upstream(n.Name)
		if o == nil {
			d.Upstreams = append(d.Upstreams, UpstreamDiff{Name: n.Name, Change: ChangeAdded, Details: []string{"endpoints " + strings.Join(n.Endpoints, ", ")}})
			continue
		}
		d.Upstreams = append(d.Upstreams, diffUpstream(o, n))
	}
	for i := range old.Upstreams {
		o := &old.Upstreams[i]
		if n, _ := new.Upstream(o.Name); n == nil {
			d.Upstreams = append(d.Upstreams, UpstreamDiff{Name: o.Name, Change: ChangeRemoved, Details: []string{}})
		}
	}
	return d
}

// branches returns a service's weighting as split branches: its targets, or
// its one upstream as a single branch of weight 1.
func branches(svc *config.Service) []split.Branch {
	ts := svc.Branches()
	bs := make([]split.Branch, len(ts))
	for i, t := range ts {
		bs[i] = split.Branch{Name: t.Upstream, Weight: t.Weight}
	}
	return bs
}

// describeRouting says where a service sends its traffic.
func describeRouting(svc *config.Service) string {
	if svc.Split == nil {
		return "upstream " + svc.Upstream
	}
	parts := make([]string, len(svc.Split.Targets))
	for i, t := range svc.Split.Targets {
		parts[i] = fmt.Sprintf("%s %d", t.Upstream, t.Weight)
	}
	return "split " + strings.Join(parts, " / ")
}

// diffService compares two versions of one service.
func diffService(o, n *config.Service) ServiceDiff {
	var details []string
	add := func(format string, args ...any) { details = append(details, fmt.Sprintf(format, args...)) }

	switch {
	case o.Split == nil && n.Split == nil:
		if o.Upstream != n.Upstream {
			add("upstream %s->%s", o.Upstream, n.Upstream)
		}
	case o.Split == nil || n.Split == nil:
		add("routing %s -> %s", describeRouting(o), describeRouting(n))
	default:
		details = append(details, diffTargets(o.Split.Targets, n.Split.Targets)...)
		switch oc, nc := o.Split.CanaryAnalysis, n.Split.CanaryAnalysis; {
		case oc == nil && nc != nil:
			add("canary_analysis added (enabled %t)", nc.Enabled)
		case oc != nil && nc == nil:
			add("canary_analysis removed")
		case oc != nil && oc.Enabled != nc.Enabled:
			add("canary_analysis enabled %t->%t", oc.Enabled, nc.Enabled)
		case !reflect.DeepEqual(oc, nc):
			add("canary_analysis settings changed")
		}
	}
	if o.BasePath != n.BasePath {
		add("base_path %s->%s", o.BasePath, n.BasePath)
	}
	if o.Host != n.Host {
		add("host %q->%q", o.Host, n.Host)
	}
	switch os, ns := o.Sticky, n.Sticky; {
	case os == nil && ns != nil:
		add("sticky added (cookie %s, ttl_s %d)", ns.Cookie, ns.TTLS)
	case os != nil && ns == nil:
		add("sticky removed (cookie %s)", os.Cookie)
	case os != nil:
		if os.Cookie != ns.Cookie {
			add("sticky cookie %s->%s (sessions re-pinned)", os.Cookie, ns.Cookie)
		}
		if os.TTLS != ns.TTLS {
			add("sticky ttl_s %d->%d", os.TTLS, ns.TTLS)
		}
	}

	d := ServiceDiff{Name: n.Name, Change: ChangeUnchanged, Details: []string{}}
	if len(details) > 0 {
		d.Change = ChangeModified
		d.Details = details
	}
	d.MovedShare = split.Displacement(branches(o), branches(n))
	return d
}

// diffTargets describes the changes between two target lists.
func diffTargets(o, n []config.Target) []string {
	var details []string
	weight := func(ts []config.Target, name string) (int, bool) {
		i := slices.IndexFunc(ts, func(t config.Target) bool { return t.Upstream == name })
		if i < 0 {
			return 0, false
		}
		return ts[i].Weight, true
	}
	for _, t := range o {
		if w, ok := weight(n, t.Upstream); !ok {
			details = append(details, fmt.Sprintf("target removed %s (weight %d)", t.Upstream, t.Weight))
		} else if w != t.Weight {
			details = append(details, fmt.Sprintf("weights %s %d->%d", t.Upstream, t.Weight, w))
		}
	}
	for _, t := range n {
		if _, ok := weight(o, t.Upstream); !ok {
			details = append(details, fmt.Sprintf("target added %s (weight %d)", t.Upstream, t.Weight))
		}
	}
	// The pick walks targets in order, so an order change moves keys even
	// when no weight does (and the first target is the kill-switch baseline).
	if common := func(a, b []config.Target) string {
		return names(slices.DeleteFunc(slices.Clone(a), func(t config.Target) bool {
			_, ok := weight(b, t.Upstream)
			return !ok
		}))
	}; common(o, n) != common(n, o) {
		details = append(details, fmt.Sprintf("targets reordered %s -> %s", names(o), names(n)))
	}
	if to, tn := total(o), total(n); to != tn {
		details = append(details, fmt.Sprintf("total weight %d->%d (keys reshuffled)", to, tn))
	}
	return details
}

func names(ts []config.Target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Upstream
	}
	return strings.Join(s, ",")
}

func total(ts []config.Target) int {
	n := 0
	for _, t := range ts {
		n += t.Weight
	}
	return n
}

// diffUpstream compares two versions of one upstream.
func diffUpstream(o, n *config.Upstream) UpstreamDiff {
	var details []string
	if o.Balancer != n.Balancer {
		details = append(details, fmt.Sprintf("balancer %s->%s", o.Balancer, n.Balancer))
	}
	for _, e := range n.Endpoints {
		if !slices.Contains(o.Endpoints, e) {
			details = append(details, "endpoint added "+e)
		}
	}
	for _, e := range o.Endpoints {
		if !slices.Contains(n.Endpoints, e) {
			details = append(details, "endpoint removed "+e)
		}
	}
	switch {
	case o.HealthCheck == nil && n.HealthCheck != nil:
		details = append(details, "health_check added (path "+n.HealthCheck.Path+")")
	case o.HealthCheck != nil && n.HealthCheck == nil:
		details = append(details, "health_check removed")
	case !reflect.DeepEqual(o.HealthCheck, n.HealthCheck):
		details = append(details, "health_check changed")
	}
	d := UpstreamDiff{Name: n.Name, Change: ChangeUnchanged, Details: []string{}}
	if len(details) > 0 {
		d.Change = ChangeModified
		d.Details = details
	}
	return d
}
