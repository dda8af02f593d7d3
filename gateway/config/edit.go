package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sentinel errors of the spec edits; callers test them with errors.Is.
var (
	// ErrServiceNotFound: the spec has no service of that name.
	ErrServiceNotFound = errors.New("service not found")
	// ErrNotTwoTargetSplit: Flip needs a split of exactly two targets.
	ErrNotTwoTargetSplit = errors.New("service does not have a 2-target split")
	// ErrNoSplit: the service routes to a single upstream, so it has no
	// weights to set or kill.
	ErrNoSplit = errors.New("service has no split")
)

// The edits below are the operations behind the one-click API calls. Each
// works on a clone, never modifies its input, and returns the new spec only
// when it validates, so s may be shared with concurrent readers.

// Flip swaps the two weights of the service's 2-target split (100/0 becomes
// 0/100, 90/10 becomes 10/90); the total, and with it the share of keys each
// weight stands for, is unchanged. It fails with ErrServiceNotFound,
// ErrNotTwoTargetSplit or a *ValidationError of the result.
func Flip(s *Spec, service string) (*Spec, error) {
	c, svc, err := edit(s, service)
	if err != nil {
		return nil, fmt.Errorf("flip service %s: %w", quote(service), err)
	}
	if svc.Split == nil || len(svc.Split.Targets) != 2 {
		return nil, fmt.Errorf("flip service %s: %w", quote(service), ErrNotTwoTargetSplit)
	}
	t := svc.Split.Targets
	t[0].Weight, t[1].Weight = t[1].Weight, t[0].Weight
	return reallocated(s, c, svc)
}

// SetWeights sets the weights of the named targets of the service's split;
// every key must be the upstream of one of its targets, and targets not named
// keep their weight. When the total weight changes the keys of every session
// are reshuffled between targets, so unless allowReshuffle is true that is
// refused with a *ValidationError at path "weights" giving the old and new
// totals; a stable split (allocation stable) is exempt, since its slot table
// moves only the changed share whatever the total. The slot table of a
// stable split is recomputed from s's (as Allocate does) by every edit here.
// It fails with ErrServiceNotFound, ErrNoSplit, or a
// *ValidationError (bad keys or weights at path "weights", or problems of the
// result).
func SetWeights(s *Spec, service string, weights map[string]int, allowReshuffle bool) (*Spec, error) {
	c, svc, err := edit(s, service)
	if err != nil {
		return nil, fmt.Errorf("set weights of service %s: %w", quote(service), err)
	}
	if svc.Split == nil {
		return nil, fmt.Errorf("set weights of service %s: %w", quote(service), ErrNoSplit)
	}
	targets := svc.Split.Targets
	var probs problems
	if len(weights) == 0 {
		probs.add("weights", "must name at least one target")
	}
	names := make([]string, 0, len(weights))
	for name := range weights {
		names = append(names, name)
	}
	slices.Sort(names) // a stable order for the messages
	oldTotal := totalWeight(targets)
	for _, name := range names {
		w := weights[name]
		i := slices.IndexFunc(targets, func(t Target) bool { return t.Upstream == name })
		switch {
		case i < 0:
			msg := fmt.Sprintf("%s is not a target of service %s; its targets are %s", quote(name), quote(service), targetNames(targets))
			upstreams := make([]string, len(targets))
			for i, t := range targets {
				upstreams[i] = t.Upstream
			}
			if near := Nearest(name, upstreams); near != "" {
				msg += "; did you mean " + quote(near) + "?"
			}
			probs.add("weights", "%s", msg)
		case w < 0 || w > MaxWeight:
			probs.add("weights", "weight of %s must be 0..%d, got %d", quote(name), MaxWeight, w)
		default:
			targets[i].Weight = w
		}
	}
	if len(probs) > 0 {
		return nil, probs.err()
	}
	if newTotal := totalWeight(targets); newTotal != oldTotal && !allowReshuffle && !svc.Split.Stable() {
		probs.add("weights", "total weight would change from %d to %d, which reshuffles every key between targets; keep the total at %d or allow reshuffling",
			oldTotal, newTotal, oldTotal)
		return nil, probs.err()
	}
	return reallocated(s, c, svc)
}

// Kill is the kill switch: every target but the baseline (Targets[0]) gets
// weight 0 and the baseline the whole total, so the total and the keys that
// were already on the baseline stay put. It fails with ErrServiceNotFound,
// ErrNoSplit or a *ValidationError of the result.
func Kill(s *Spec, service string) (*Spec, error) {
	c, svc, err := edit(s, service)
	if err != nil {
		return nil, fmt.Errorf("kill service %s: %w", quote(service), err)
	}
	if svc.Split == nil || len(svc.Split.Targets) == 0 {
		return nil, fmt.Errorf("kill service %s: %w", quote(service), ErrNoSplit)
	}
	t := svc.Split.Targets
	total := totalWeight(t)
	for i := range t {
		t[i].Weight = 0
	}
	t[0].Weight = total
	return reallocated(s, c, svc)
}

// edit clones s and finds the service in the clone.
func edit(s *Spec, service string) (*Spec, *Service, error) {
	c := s.Clone()
	svc, _ := c.Service(service)
	if svc == nil {
		return nil, nil, &ServiceNotFoundError{Name: service, Near: s.NearestService(service)}
	}
	return c, svc, nil
}

// reallocated recomputes the slot table of svc, the edited service of c,
// from its version in s (see Allocate), and validates c.
func reallocated(s, c *Spec, svc *Service) (*Spec, error) {
	old, _ := s.Service(svc.Name)
	reallocate(old, svc)
	return validated(c)
}

func validated(s *Spec) (*Spec, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// totalWeight sums the weights of targets; with at most MaxTargets weights of
// at most MaxWeight each it cannot overflow, and on an invalid spec the result
// is refused by validation anyway.
func totalWeight(targets []Target) int {
	total := 0
	for _, t := range targets {
		total += t.Weight
	}
	return total
}

func targetNames(targets []Target) string {
	names := make([]string, len(targets))
	for i, t := range targets {
		names[i] = quote(t.Upstream)
	}
	return strings.Join(names, ", ")
}
