package canary

import (
	"slices"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// Group is one canary group of a generation: a service whose split has
// canary_analysis and exactly two targets, the first the baseline and the
// second the canary. The zero value is a group of no service with total 0,
// which is always complete. A Group is a plain value, safe for concurrent
// reads.
type Group struct {
	// Service is the group's name: the service's for a split, and
	// "<service>/<alias>" (config.ModelGroupName) for a model alias.
	Service string
	// Kind is apiv1.CanaryKindService or apiv1.CanaryKindModel.
	Kind string
	// Baseline and Canary are the upstream names of targets[0] and
	// targets[1].
	Baseline string
	Canary   string
	// Total is the sum of the two configured weights; it never changes.
	Total int
	// Configured is the canary's weight in the generation's spec.
	Configured int
	// Analysis is the split's canary_analysis.
	Analysis config.CanaryAnalysis
	// ManagedBy is the split's managed_by: when not empty, something else
	// drives the weights and Evaluate never acts.
	ManagedBy string
}

// Above returns the canary weight of the step up from weight w: the first
// weight of the schedule (Analysis.Steps, as config.StepWeight of Total)
// above w, or without a schedule w + Analysis.Step; at most Total.
func (g Group) Above(w int) int {
	if len(g.Analysis.Steps) == 0 {
		return min(g.Total, w+g.Analysis.Step)
	}
	for _, pc := range g.Analysis.Steps {
		if sw := config.StepWeight(g.Total, pc); sw > w {
			return min(sw, g.Total)
		}
	}
	return g.Total
}

// Below returns the canary weight of the step down from weight w: the last
// weight of the schedule below w (0 when none), or without a schedule
// w - Analysis.Step; at least 0.
func (g Group) Below(w int) int {
	if len(g.Analysis.Steps) == 0 {
		return max(0, w-g.Analysis.Step)
	}
	below := 0
	for _, pc := range g.Analysis.Steps {
		if sw := config.StepWeight(g.Total, pc); sw < w {
			below = sw
		}
	}
	return below
}

// Gated reports whether the step up to weight to waits for an operator:
// always under config.GateManual, only the step to Total under
// config.GateFinal, never otherwise.
func (g Group) Gated(to int) bool {
	switch g.Analysis.Gate {
	case config.GateManual:
		return true
	case config.GateFinal:
		return to >= g.Total
	}
	return false
}

// Weights returns the target weights with the canary at weight canary,
// baseline first: {Total - canary, canary}.
func (g Group) Weights(canary int) [2]int {
	return [2]int{g.Total - canary, canary}
}

// Groups returns, in spec order, the canary group of every service of spec
// whose Split has CanaryAnalysis and exactly two targets. Other services,
// and splits of more than two targets, are skipped. A nil spec, or one with
// no such service, returns nil. The result shares no memory with spec.
func Groups(spec *config.Spec) []Group {
	if spec == nil {
		return nil
	}
	var groups []Group
	for i := range spec.Services {
		svc := &spec.Services[i]
		groups = appendModelGroups(groups, svc)
		if svc.Split == nil || svc.Split.CanaryAnalysis == nil {
			continue
		}
		t := svc.Targets()
		if len(t) != 2 {
			continue
		}
		ca := *svc.Split.CanaryAnalysis
		ca.Steps = slices.Clone(ca.Steps)
		ca.Webhooks = slices.Clone(ca.Webhooks)
		groups = append(groups, Group{
			Service:    svc.Name,
			Kind:       apiv1.CanaryKindService,
			Baseline:   t[0].Upstream,
			Canary:     t[1].Upstream,
			Total:      t[0].Weight + t[1].Weight,
			Configured: t[1].Weight,
			Analysis:   ca,
			ManagedBy:  svc.Split.ManagedBy,
		})
	}
	return groups
}

// appendModelGroups appends the groups of svc's model aliases that have
// canary_analysis and exactly two targets, named "<service>/<alias>", of
// kind model, in spec order.
func appendModelGroups(groups []Group, svc *config.Service) []Group {
	for j := range svc.Models {
		a := &svc.Models[j]
		if a.CanaryAnalysis == nil || len(a.Targets) != 2 {
			continue
		}
		ca := *a.CanaryAnalysis
		ca.Steps = slices.Clone(ca.Steps)
		ca.Webhooks = slices.Clone(ca.Webhooks)
		groups = append(groups, Group{
			Service:    config.ModelGroupName(svc.Name, a.Alias),
			Kind:       apiv1.CanaryKindModel,
			Baseline:   a.Targets[0].Upstream,
			Canary:     a.Targets[1].Upstream,
			Total:      a.Targets[0].Weight + a.Targets[1].Weight,
			Configured: a.Targets[1].Weight,
			Analysis:   ca,
		})
	}
	return groups
}
