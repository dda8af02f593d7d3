package canary

import "github.com/dwara/dwara/gateway/config"

// Group is one canary group of a generation: a service whose split has
// canary_analysis and exactly two targets, the first the baseline and the
// second the canary. The zero value is a group of no service with total 0,
// which is always complete. A Group is a plain value, safe for concurrent
// reads.
type Group struct {
	// Service is the service's name.
	Service string
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
		if svc.Split == nil || svc.Split.CanaryAnalysis == nil {
			continue
		}
		t := svc.Targets()
		if len(t) != 2 {
			continue
		}
		groups = append(groups, Group{
			Service:    svc.Name,
			Baseline:   t[0].Upstream,
			Canary:     t[1].Upstream,
			Total:      t[0].Weight + t[1].Weight,
			Configured: t[1].Weight,
			Analysis:   *svc.Split.CanaryAnalysis,
		})
	}
	return groups
}
