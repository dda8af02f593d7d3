package config

import (
	"encoding/json"
	"slices"
)

// CanaryKeys returns, for every service of s whose split has
// canary_analysis and exactly two targets (a canary group), a key that
// names what the canary controller judges: the split's targets and
// weights, its canary_analysis and the two target upstreams as declared,
// all with their defaults filled in. Two generations whose group has the
// same key run one canary: the newer keeps the older's state (the weight
// in force, the step, the hold, a rollback); a different key starts the
// canary afresh. A nil s, or one without canary groups, returns nil. It
// only reads s, so it is safe to call concurrently with other readers.
func CanaryKeys(s *Spec) map[string]string {
	if s == nil {
		return nil
	}
	var keys map[string]string
	d := s.Clone()
	d.Defaults()
	for i := range d.Services {
		svc := &d.Services[i]
		if svc.Split == nil || svc.Split.CanaryAnalysis == nil || len(svc.Split.Targets) != 2 {
			continue
		}
		if svc.Split.CanaryAnalysis.Gate == GateAuto {
			svc.Split.CanaryAnalysis.Gate = "" // the same gate, spelled out
		}
		if after, on := svc.Split.CanaryAnalysis.Brake(); on && after == DefaultLocalBrakeAfterS {
			svc.Split.CanaryAnalysis.LocalBrake = nil // the default brake, spelled out
		}
		ident := struct {
			Targets   []Target        `json:"targets"`
			Analysis  *CanaryAnalysis `json:"canary_analysis"`
			Upstreams []*Upstream     `json:"upstreams"`
		}{Targets: svc.Split.Targets, Analysis: svc.Split.CanaryAnalysis}
		for _, t := range svc.Split.Targets {
			u, _ := d.Upstream(t.Upstream)
			ident.Upstreams = append(ident.Upstreams, u)
		}
		b, err := json.Marshal(ident)
		if err != nil {
			continue // a spec's own types always encode; no key starts afresh
		}
		if keys == nil {
			keys = make(map[string]string)
		}
		keys[svc.Name] = string(b)
	}
	return keys
}

// CanaryReset returns, in new's service order, the canary groups of new
// that a publish of new over old would start afresh: groups of both specs
// whose key (CanaryKeys) differs. A group new to new, which has no state to
// lose, is not listed. The result is never nil.
func CanaryReset(old, new *Spec) []string {
	reset := []string{}
	if new == nil {
		return reset
	}
	ok, nk := CanaryKeys(old), CanaryKeys(new)
	for i := range new.Services {
		name := new.Services[i].Name
		k, isGroup := nk[name]
		if was, had := ok[name]; isGroup && had && was != k && !slices.Contains(reset, name) {
			reset = append(reset, name)
		}
	}
	return reset
}
