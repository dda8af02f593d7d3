package proxy

import (
	"fmt"

	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/split"
)

// CanaryRecorders are the recorders of one canary group of the generation
// being served: every answer of the group's baseline and canary targets is
// observed in them (a client that went away is not), for the fleet-wide
// windows of the canary analysis.
type CanaryRecorders struct {
	Service          string
	Baseline, Canary *canary.Recorder
}

// CanaryRecorders returns the generation being served (0 before the first
// Apply) and the recorders of its canary groups, in spec order. A new
// generation has new recorders: its windows start empty.
func (p *Proxy) CanaryRecorders() (int64, []CanaryRecorders) {
	t := p.table.Load()
	if t == nil {
		return 0, nil
	}
	recs := make([]CanaryRecorders, 0, len(t.canaries)+len(t.modelCanaries))
	for _, svc := range t.canaries {
		recs = append(recs, CanaryRecorders{Service: svc.name, Baseline: svc.targets[0].rec, Canary: svc.targets[1].rec})
	}
	for _, a := range t.modelCanaries {
		recs = append(recs, CanaryRecorders{Service: a.group, Baseline: a.targets[0].rec, Canary: a.targets[1].rec})
	}
	return t.generation, recs
}

// SetCanaryWeight swaps the split of the canary group of service in
// generation for one where the canary target has weight canaryWeight and
// the baseline the rest of the total: the next request is picked by it.
// It reports false, changing nothing, when generation is not the one
// being served (the change belongs to an older or newer one); a service
// without canary analysis or a weight outside 0..total is an error. The
// generation's own weights come back with the next Apply.
func (p *Proxy) SetCanaryWeight(generation int64, service string, canaryWeight int) (bool, error) {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	t := p.table.Load()
	if t == nil || t.generation != generation {
		return false, nil
	}
	for _, svc := range t.canaries {
		if svc.name != service {
			continue
		}
		g := svc.canary
		if canaryWeight < 0 || canaryWeight > g.total {
			return false, fmt.Errorf("canary weight %d of %q: want 0..%d", canaryWeight, service, g.total)
		}
		sp, err := split.New([]int{g.total - canaryWeight, canaryWeight})
		if err != nil {
			return false, fmt.Errorf("canary weight of %q: %w", service, err)
		}
		svc.split.Store(sp)
		g.weight.Set(float64(canaryWeight))
		return true, nil
	}
	for _, a := range t.modelCanaries {
		if a.group != service {
			continue
		}
		g := a.canary
		if canaryWeight < 0 || canaryWeight > g.total {
			return false, fmt.Errorf("canary weight %d of %q: want 0..%d", canaryWeight, service, g.total)
		}
		sp, err := split.New([]int{g.total - canaryWeight, canaryWeight})
		if err != nil {
			return false, fmt.Errorf("canary weight of %q: %w", service, err)
		}
		a.sp.Store(sp)
		g.weight.Set(float64(canaryWeight))
		return true, nil
	}
	return false, fmt.Errorf("service %q has no canary analysis in generation %d", service, generation)
}

// CanaryWeight returns the canary weight in force of the canary group of
// service in the generation being served, and false when it has none.
func (p *Proxy) CanaryWeight(service string) (int, bool) {
	t := p.table.Load()
	if t == nil {
		return 0, false
	}
	for _, svc := range t.canaries {
		if svc.name == service {
			return int(svc.split.Load().Weight(1)), true
		}
	}
	for _, a := range t.modelCanaries {
		if a.group == service {
			return int(a.sp.Load().Weight(1)), true
		}
	}
	return 0, false
}
