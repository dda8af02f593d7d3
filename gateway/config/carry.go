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
	for i := range d.Services {
		svc := &d.Services[i]
		for j := range svc.Models {
			a := &svc.Models[j]
			if a.CanaryAnalysis == nil || len(a.Targets) != 2 {
				continue
			}
			normalizeCanaryKey(a.CanaryAnalysis)
			ident := struct {
				Targets   []ModelTarget   `json:"model_targets"`
				Analysis  *CanaryAnalysis `json:"canary_analysis"`
				Upstreams []*Upstream     `json:"upstreams"`
			}{Targets: a.Targets, Analysis: a.CanaryAnalysis}
			for _, t := range a.Targets {
				u, _ := d.Upstream(t.Upstream)
				ident.Upstreams = append(ident.Upstreams, u)
			}
			b, err := json.Marshal(ident)
			if err != nil {
				continue
			}
			if keys == nil {
				keys = make(map[string]string)
			}
			keys[ModelGroupName(svc.Name, a.Alias)] = string(b)
		}
	}
	return keys
}

// ModelGroupName is the canary group name of alias of service:
// "<service>/<alias>" (a service name has no slash, so the name is never
// a service's).
func ModelGroupName(service, alias string) string {
	return service + "/" + alias
}

// normalizeCanaryKey spells the defaults of ca that are left out and
// written out the same way, for CanaryKeys.
func normalizeCanaryKey(ca *CanaryAnalysis) {
	if ca.Gate == GateAuto {
		ca.Gate = ""
	}
	if after, on := ca.Brake(); on && after == DefaultLocalBrakeAfterS {
		ca.LocalBrake = nil
	}
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
	check := func(name string) {
		k, isGroup := nk[name]
		if was, had := ok[name]; isGroup && had && was != k && !slices.Contains(reset, name) {
			reset = append(reset, name)
		}
	}
	for i := range new.Services {
		check(new.Services[i].Name)
		for _, a := range new.Services[i].Models {
			check(ModelGroupName(new.Services[i].Name, a.Alias))
		}
	}
	return reset
}
