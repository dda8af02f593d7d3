package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// Change kinds of a ServiceDiff or UpstreamDiff.
const (
	ChangeAdded     = "added"
	ChangeRemoved   = "removed"
	ChangeModified  = "modified"
	ChangeUnchanged = "unchanged"
)

// SpecDiff is what changed between two specs. Its slices are never nil.
type SpecDiff struct {
	// Services lists every service of either spec: the new spec's in order,
	// then the removed ones in the old spec's order.
	Services []ServiceDiff
	// Upstreams lists every upstream of either spec, in the same order.
	Upstreams []UpstreamDiff
	// CanaryReset names the canary groups that publishing the new spec
	// over the old would start afresh (CanaryReset).
	CanaryReset []string
}

// ServiceDiff is what changed in one service.
type ServiceDiff struct {
	Name string
	// Change is one of the Change* constants.
	Change string
	// Details lists each change in words, e.g. "weights api-stable 95->90";
	// empty, never nil, when nothing changed.
	Details []string
	// MovedShare is the share of the service's request keys whose upstream
	// changes (Displacement of the two weightings); 1 for an added or
	// removed service. Where MatchesDecide, it is the share of the
	// requests the weights decide (those no rule matches): the requests a
	// rule takes are not counted.
	MovedShare float64
	// MatchesDecide is true when either version of the service has match
	// rules: the requests a rule matches go where the rule says,
	// whatever the weights, so MovedShare does not count them, and where
	// MatchChanges is not empty some of them may move, by a share the
	// weights cannot tell. False for an added or removed service, whose
	// every request moves.
	MatchesDecide bool
	// MatchChanges lists the changes of the split's match rules
	// (diffMatch); nil when there are none or the service was added or
	// removed.
	MatchChanges []MatchChange
}

// UpstreamDiff is what changed in one upstream.
type UpstreamDiff struct {
	Name string
	// Change is one of the Change* constants.
	Change string
	// Details lists each change in words, e.g. "endpoint added 10.0.0.3:80";
	// empty, never nil, when nothing changed or the upstream was removed.
	Details []string
}

// Diff compares the spec old with the spec new, service by service and
// upstream by upstream, matched by name. A nil spec counts as an empty one.
// Diff only reads both specs, so it is safe to call concurrently with other
// readers.
func Diff(old, new *Spec) SpecDiff {
	if old == nil {
		old = &Spec{}
	}
	if new == nil {
		new = &Spec{}
	}
	d := SpecDiff{Services: []ServiceDiff{}, Upstreams: []UpstreamDiff{}, CanaryReset: CanaryReset(old, new)}
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

// describeRouting says where a service sends its traffic: its upstream,
// or its split's weights and then the names of its match rules in order.
func describeRouting(svc *Service) string {
	if svc.Split == nil {
		return "upstream " + svc.Upstream
	}
	parts := make([]string, len(svc.Split.Targets))
	for i, t := range svc.Split.Targets {
		parts[i] = fmt.Sprintf("%s %d", t.Upstream, t.Weight)
	}
	s := "split " + strings.Join(parts, " / ")
	if len(svc.Split.Match) > 0 {
		names := make([]string, len(svc.Split.Match))
		for i, r := range svc.Split.Match {
			names[i] = r.Name
		}
		s += ", match rules " + strings.Join(names, ", ")
	}
	return s
}

// diffService compares two versions of one service.
func diffService(o, n *Service) ServiceDiff {
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
		details = append(details, diffTargets(o.Split.Targets, n.Split.Targets, o.Split.Stable() && n.Split.Stable())...)
		if oa, na := allocationOf(o.Split), allocationOf(n.Split); oa != na {
			add("allocation %s->%s", oa, na)
		} else if o.Split.Stable() && slices.Equal(o.Split.Targets, n.Split.Targets) &&
			!reflect.DeepEqual(o.Split.Slots, n.Split.Slots) {
			add("slot table changed")
		}
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
		add("sticky added (cookie %s, ttl_s %d)", ns.Cookie, ns.TTLSeconds)
	case os != nil && ns == nil:
		add("sticky removed (cookie %s)", os.Cookie)
	case os != nil:
		if os.Cookie != ns.Cookie {
			add("sticky cookie %s->%s (sessions re-pinned)", os.Cookie, ns.Cookie)
		}
		if os.TTLSeconds != ns.TTLSeconds {
			add("sticky ttl_s %d->%d", os.TTLSeconds, ns.TTLSeconds)
		}
	}
	switch oo, no := o.Override, n.Override; {
	case oo == nil && no != nil:
		add("override added (header %s)", no.Header)
	case oo != nil && no == nil:
		add("override removed (header %s)", oo.Header)
	case oo != nil && oo.Header != no.Header:
		add("override header %s->%s", oo.Header, no.Header)
	}
	switch om, nm := o.Mirror, n.Mirror; {
	case om == nil && nm != nil:
		add("mirror added (%s %g%%)", nm.Upstream, nm.Percent)
	case om != nil && nm == nil:
		add("mirror removed (%s %g%%)", om.Upstream, om.Percent)
	case om != nil:
		if om.Upstream != nm.Upstream {
			add("mirror upstream %s->%s", om.Upstream, nm.Upstream)
		}
		if om.Percent != nm.Percent {
			add("mirror percent %g->%g", om.Percent, nm.Percent)
		}
		if om.MaxBodyBytes != nm.MaxBodyBytes {
			add("mirror max_body_bytes %d->%d", om.MaxBodyBytes, nm.MaxBodyBytes)
		}
	}
	switch oc, nc := o.Cache, n.Cache; {
	case oc == nil && nc != nil:
		add("cache added (max_bytes %d)", nc.MaxBytes)
	case oc != nil && nc == nil:
		add("cache removed")
	case oc != nil && !oc.Equal(nc):
		add("cache settings changed (its entries are dropped)")
	}

	mc := diffMatch(rulesOf(o), rulesOf(n))
	for _, c := range mc {
		details = append(details, matchDetail(c))
	}
	details = append(details, diffModels(o, n)...)

	d := ServiceDiff{Name: n.Name, Change: ChangeUnchanged, Details: []string{}, MatchChanges: mc,
		MatchesDecide: len(rulesOf(o)) > 0 || len(rulesOf(n)) > 0}
	if len(details) > 0 {
		d.Change = ChangeModified
		d.Details = details
	}
	d.MovedShare = ServiceDisplacement(o, n)
	return d
}

// diffModels describes the changes of a service's model aliases and
// max_body_bytes, alias by alias.
func diffModels(o, n *Service) []string {
	var details []string
	if o.ModelMaxBodyBytes() != n.ModelMaxBodyBytes() && (len(o.Models) > 0 || len(n.Models) > 0) {
		details = append(details, fmt.Sprintf("max_body_bytes %d->%d", o.ModelMaxBodyBytes(), n.ModelMaxBodyBytes()))
	}
	find := func(as []ModelAlias, name string) *ModelAlias {
		for i := range as {
			if as[i].Alias == name {
				return &as[i]
			}
		}
		return nil
	}
	describe := func(a *ModelAlias) string {
		parts := make([]string, len(a.Targets))
		for i, t := range a.Targets {
			parts[i] = fmt.Sprintf("%s:%s %d", t.Upstream, t.Model, t.Weight)
		}
		return strings.Join(parts, " / ")
	}
	for i := range n.Models {
		na := &n.Models[i]
		oa := find(o.Models, na.Alias)
		switch {
		case oa == nil:
			details = append(details, fmt.Sprintf("model alias %s added (%s)", quote(na.Alias), describe(na)))
		case !reflect.DeepEqual(oa.Targets, na.Targets):
			details = append(details, fmt.Sprintf("model alias %s targets %s -> %s", quote(na.Alias), describe(oa), describe(na)))
		}
		if oa != nil && oa.Affinity != na.Affinity {
			details = append(details, fmt.Sprintf("model alias %s affinity %q->%q", quote(na.Alias), oa.Affinity, na.Affinity))
		}
	}
	for i := range o.Models {
		if find(n.Models, o.Models[i].Alias) == nil {
			details = append(details, fmt.Sprintf("model alias %s removed", quote(o.Models[i].Alias)))
		}
	}
	return details
}

// allocationOf is the allocation of sp, "hash" when unset.
func allocationOf(sp *Split) string {
	if sp.Stable() {
		return AllocationStable
	}
	return AllocationHash
}

// diffTargets describes the changes between two target lists; stable is
// true when both versions allocate by slot table, where neither the order of
// the targets nor a change of the total moves keys by itself.
func diffTargets(o, n []Target, stable bool) []string {
	var details []string
	weight := func(ts []Target, name string) (int, bool) {
		i := slices.IndexFunc(ts, func(t Target) bool { return t.Upstream == name })
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
	if common := func(a, b []Target) string {
		return upstreamList(slices.DeleteFunc(slices.Clone(a), func(t Target) bool {
			_, ok := weight(b, t.Upstream)
			return !ok
		}))
	}; common(o, n) != common(n, o) {
		details = append(details, fmt.Sprintf("targets reordered %s -> %s", upstreamList(o), upstreamList(n)))
	}
	if to, tn := totalWeight(o), totalWeight(n); to != tn {
		if stable {
			details = append(details, fmt.Sprintf("total weight %d->%d", to, tn))
		} else {
			details = append(details, fmt.Sprintf("total weight %d->%d (keys reshuffled)", to, tn))
		}
	}
	return details
}

// upstreamList joins the upstreams of ts with commas, in order.
func upstreamList(ts []Target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Upstream
	}
	return strings.Join(s, ",")
}

// diffUpstream compares two versions of one upstream.
func diffUpstream(o, n *Upstream) UpstreamDiff {
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
	for _, f := range []struct {
		name string
		o, n int
	}{
		{"connect_timeout_ms", o.ConnectTimeoutMS, n.ConnectTimeoutMS},
		{"response_header_timeout_ms", o.ResponseHeaderTimeoutMS, n.ResponseHeaderTimeoutMS},
		{"idle_timeout_ms", o.IdleTimeoutMS, n.IdleTimeoutMS},
	} {
		if f.o != f.n {
			details = append(details, fmt.Sprintf("%s %d->%d", f.name, f.o, f.n))
		}
	}
	if !reflect.DeepEqual(o.Passive, n.Passive) {
		details = append(details, "passive changed")
	}
	if o.AllowLinkLocal != n.AllowLinkLocal {
		details = append(details, fmt.Sprintf("allow_link_local %t->%t", o.AllowLinkLocal, n.AllowLinkLocal))
	}
	d := UpstreamDiff{Name: n.Name, Change: ChangeUnchanged, Details: []string{}}
	if len(details) > 0 {
		d.Change = ChangeModified
		d.Details = details
	}
	return d
}
