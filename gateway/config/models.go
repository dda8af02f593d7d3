package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// Affinity kinds of ModelAlias.Affinity.
const (
	// AffinityUser keys the pick by the body's top-level "user".
	AffinityUser = "user"
	// AffinityHeaderPrefix, followed by a field name, keys the pick by
	// that request header.
	AffinityHeaderPrefix = "header:"
	// AffinityCookie keys the pick by the service's sticky cookie.
	AffinityCookie = "cookie"
	// AffinityNone keys the pick by the request id (the default).
	AffinityNone = "none"
)

// Limits of model aliases.
const (
	// MaxModelAliases is the most aliases a service may have.
	MaxModelAliases = 64
	// MaxModelName is the longest alias or model name, in bytes.
	MaxModelName = 256
	// DefaultModelMaxBodyBytes is a service's max_body_bytes when it has
	// models and leaves it out (1 MiB).
	DefaultModelMaxBodyBytes = 1 << 20
	// MaxModelBodyBytes bounds max_body_bytes (32 MiB).
	MaxModelBodyBytes = 32 << 20
)

// ModelAlias is one model name a client of an OpenAI-compatible API
// sends ("model" in the request body), served by a weighted pick over
// Targets: the body's model is rewritten to the picked target's Model and
// the request sent to its Upstream.
type ModelAlias struct {
	// Alias is the "model" value clients send: 1..MaxModelName bytes of
	// printable UTF-8, unique in the service.
	Alias string `json:"alias"`
	// Targets are 1..MaxTargets weighted (upstream, model) pairs.
	Targets []ModelTarget `json:"targets"`
	// Affinity is what keys the pick: AffinityUser, "header:NAME",
	// AffinityCookie (the service must be sticky) or AffinityNone; ""
	// means none (the request id). A request without the key (no "user",
	// no such header) is keyed by its request id.
	Affinity string `json:"affinity,omitempty"`
	// CanaryAnalysis puts the alias under the canary controller as the
	// group "<service>/<alias>" (kind model): exactly two targets, the
	// first the baseline, the second the canary; the fields and rules of
	// a split's, and the metric may also be MetricTTFTP99.
	CanaryAnalysis *CanaryAnalysis `json:"canary_analysis,omitempty"`
}

// ModelTarget is one weighted target of a model alias. When decoded from
// JSON or YAML an absent weight means 1, as for a split's Target.
type ModelTarget struct {
	// Upstream is a declared upstream.
	Upstream string `json:"upstream"`
	// Model is the model name the upstream is sent in the body.
	Model  string `json:"model"`
	Weight int    `json:"weight"`
}

// UnmarshalJSON decodes a model target; an absent (or null) weight means
// 1. Unknown fields are refused.
func (t *ModelTarget) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	type plain ModelTarget // no methods, so no recursion
	p := plain{Weight: 1}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("decode model target: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode model target: unexpected data after the target")
	}
	*t = ModelTarget(p)
	return nil
}

// ModelMaxBodyBytes is the largest request body the service reads to
// find the model: MaxBodyBytes, or DefaultModelMaxBodyBytes when 0.
func (s *Service) ModelMaxBodyBytes() int {
	if s.MaxBodyBytes > 0 {
		return s.MaxBodyBytes
	}
	return DefaultModelMaxBodyBytes
}

// AffinityHeader returns the header name of a "header:NAME" affinity, or
// "".
func (a *ModelAlias) AffinityHeader() string {
	name, _ := strings.CutPrefix(a.Affinity, AffinityHeaderPrefix)
	if name == a.Affinity {
		return ""
	}
	return name
}

// models checks a service's model aliases and max_body_bytes.
func (v *validator) models(svc *Service, path string) {
	mb := member(path, "max_body_bytes")
	if len(svc.Models) == 0 {
		if svc.MaxBodyBytes != 0 {
			v.probs.add(mb, "applies only to a service with models (nothing else reads the body); remove it or add models")
		}
		return
	}
	if svc.MaxBodyBytes != 0 {
		v.between(mb, svc.MaxBodyBytes, 1, MaxModelBodyBytes)
	}
	mp := member(path, "models")
	if len(svc.Models) > MaxModelAliases {
		v.probs.add(mp, "at most %d aliases, got %d", MaxModelAliases, len(svc.Models))
		return
	}
	seen := map[string]int{}
	for i := range svc.Models {
		a := &svc.Models[i]
		ap := index(mp, i)
		if msg := checkModelName(a.Alias); msg != "" {
			v.probs.add(member(ap, "alias"), "%s", msg)
		} else if j, dup := seen[a.Alias]; dup {
			v.probs.add(member(ap, "alias"), "duplicate alias %s (also %s)", quote(a.Alias), index(mp, j))
		} else {
			seen[a.Alias] = i
		}
		v.modelTargets(a.Targets, member(ap, "targets"))
		v.affinity(a, svc, member(ap, "affinity"))
		if a.CanaryAnalysis != nil {
			total := 0
			for _, t := range a.Targets {
				if t.Weight < 0 || t.Weight > MaxWeight {
					total = -1
					break
				}
				total += t.Weight
			}
			v.canaryOf(a.CanaryAnalysis, member(ap, "canary_analysis"), len(a.Targets), max(total, 0), modelMetrics)
		}
	}
}

// modelTargets checks an alias's targets: 1..MaxTargets, each a declared
// upstream and a model, weights 0..MaxWeight with a total of 1..MaxWeight.
func (v *validator) modelTargets(ts []ModelTarget, tp string) {
	if n := len(ts); n < 1 || n > MaxTargets {
		v.probs.add(tp, "must list 1..%d targets, got %d", MaxTargets, n)
		if n == 0 {
			return
		}
	}
	total, weightsOK := 0, true
	seen := map[[2]string]int{}
	for i, t := range ts {
		p := index(tp, i)
		v.ref(t.Upstream, member(p, "upstream"))
		if msg := checkModelName(t.Model); msg != "" {
			v.probs.add(member(p, "model"), "%s", msg)
		}
		key := [2]string{t.Upstream, t.Model}
		if j, dup := seen[key]; dup {
			v.probs.add(p, "upstream %s with model %s is already a target (also %s)", quote(t.Upstream), quote(t.Model), index(tp, j))
		} else {
			seen[key] = i
		}
		if t.Weight < 0 || t.Weight > MaxWeight {
			v.probs.add(member(p, "weight"), "must be 0..%d, got %d", MaxWeight, t.Weight)
			weightsOK = false
			continue
		}
		total += t.Weight
	}
	if weightsOK && len(ts) <= MaxTargets && (total < 1 || total > MaxWeight) {
		v.probs.add(tp, "total weight must be 1..%d, got %d", MaxWeight, total)
	}
}

var affinities = []string{AffinityUser, AffinityHeaderPrefix + "NAME", AffinityCookie, AffinityNone}

// affinity checks an alias's affinity.
func (v *validator) affinity(a *ModelAlias, svc *Service, path string) {
	switch {
	case a.Affinity == "" || a.Affinity == AffinityNone || a.Affinity == AffinityUser:
	case a.Affinity == AffinityCookie:
		if svc.Sticky == nil {
			v.probs.add(path, "cookie keys the pick by the service's sticky cookie, and the service has no sticky; add sticky or choose user, header:NAME or none")
		}
	case strings.HasPrefix(a.Affinity, AffinityHeaderPrefix):
		if h := a.AffinityHeader(); len(h) > 64 || !isToken(h) {
			v.probs.add(path, "header:NAME needs an HTTP field name (a token of at most 64 characters), got %s", quote(h))
		} else if slices.Contains(reservedOverrideHeaders, strings.ToLower(h)) {
			v.probs.add(path, "%s is a field the gateway sets or the connection needs; choose another", quote(h))
		}
	default:
		v.probs.add(path, "unknown affinity %s; allowed: %s", quote(a.Affinity), strings.Join(affinities, ", "))
	}
}

// checkModelName returns what is wrong with an alias or model name, or "".
func checkModelName(s string) string {
	switch {
	case s == "":
		return "is required: a model name, e.g. gpt-4o"
	case len(s) > MaxModelName:
		return fmt.Sprintf("at most %d bytes, got %d", MaxModelName, len(s))
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return "must not contain control characters"
	}
	return ""
}

// SetModelGroupWeights returns a copy of s in which the two targets of the
// model group named group ("<service>/<alias>", ModelGroupName) have
// weights baseline and canary; s is not modified. It fails with
// ErrServiceNotFound for an unknown service, an error for an alias that is
// not a group of two targets, or a *ValidationError of the result.
func SetModelGroupWeights(s *Spec, group string, baseline, canary int) (*Spec, error) {
	svcName, alias, _ := strings.Cut(group, "/")
	next := s.Clone()
	for i := range next.Services {
		svc := &next.Services[i]
		if svc.Name != svcName {
			continue
		}
		for j := range svc.Models {
			a := &svc.Models[j]
			if a.Alias != alias {
				continue
			}
			if len(a.Targets) != 2 {
				return nil, fmt.Errorf("model alias %q of service %q has %d targets, not a canary group of 2", alias, svcName, len(a.Targets))
			}
			a.Targets[0].Weight, a.Targets[1].Weight = baseline, canary
			if err := next.Validate(); err != nil {
				return nil, err
			}
			return next, nil
		}
		return nil, fmt.Errorf("service %q has no model alias %q", svcName, alias)
	}
	return nil, ErrServiceNotFound
}
