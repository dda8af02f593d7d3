package canary

import (
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// relativeGroup rolls back only relative to the baseline (factor 2, no
// absolute threshold) and promotes under 0.1%: a canary at a few percent
// of errors is never promoted, only judged against the baseline.
func relativeGroup() Group {
	g := testGroup()
	g.Analysis.CooldownSeconds = 0
	g.Analysis.Promote.Threshold = 0.001
	g.Analysis.Rollback = config.Threshold{Metric: config.MetricErrorRate, Relative: &config.Relative{Factor: 2}}
	return g
}

// TestRelativeFactor: with the baseline at 3% errors, a canary at 4% is
// within twice it (no action), one at 7% is rolled back by step, with the
// rule and its figures, and one at 30% is no severe rollback (relative
// bounds roll back by step).
func TestRelativeFactor(t *testing.T) {
	t.Parallel()
	g := relativeGroup()
	s := State{CanaryWeight: 10}
	if a, ok := Evaluate(at(0), g, s, window(1000, 30, 1000, 40)); ok {
		t.Fatalf("canary 4%% against 3%%: %+v, want nothing", a)
	}
	for _, cErr := range []uint64{70, 300} {
		a, ok := Evaluate(at(0), g, s, window(1000, 30, 1000, cErr))
		if !ok || a.Kind != apiv1.CanaryRollback || a.To != 5 || a.Rule != "rollback.relative" {
			t.Fatalf("canary %d/1000 against 3%%: %+v %t, want a rollback 10 -> 5 by rollback.relative", cErr, a, ok)
		}
		f := a.RuleFigures
		if f["factor"] != 2 || f["baseline"] != 0.03 || f["bound"] != 0.06 || f["canary"] != float64(cErr)/1000 {
			t.Errorf("figures %v", f)
		}
	}
	// No baseline requests: nothing to compare with, nothing done.
	if a, ok := Evaluate(at(0), g, s, window(0, 0, 1000, 300)); ok {
		t.Errorf("with no baseline requests: %+v, want nothing", a)
	}
}

// TestRelativeMarginAndThreshold: margin and factor must both be exceeded;
// an absolute threshold beside them still rolls back on its own, and
// severe, and names itself.
func TestRelativeMarginAndThreshold(t *testing.T) {
	t.Parallel()
	g := relativeGroup()
	g.Analysis.Rollback.Relative = &config.Relative{Margin: 0.005, Factor: 2}
	s := State{CanaryWeight: 10}
	// baseline 0.1%: factor bound 0.2%, margin bound 0.6%: 0.5% exceeds
	// the first only.
	if a, ok := Evaluate(at(0), g, s, window(1000, 1, 1000, 5)); ok {
		t.Fatalf("0.5%% against 0.1%%: %+v, want nothing", a)
	}
	if a, ok := Evaluate(at(0), g, s, window(1000, 1, 1000, 7)); !ok || a.Rule != "rollback.relative" {
		t.Fatalf("0.7%% against 0.1%%: %+v, want a rollback by rollback.relative", a)
	}
	g.Analysis.Rollback.Threshold = 0.05
	// baseline 4%: relative bound 8%; 6% crosses the absolute bound only.
	if a, ok := Evaluate(at(0), g, s, window(1000, 40, 1000, 60)); !ok || a.Kind != apiv1.CanaryRollback || a.Rule != "rollback.threshold" {
		t.Fatalf("6%% against 4%% over a 5%% threshold: %+v", a)
	}
	if a, ok := Evaluate(at(0), g, s, window(1000, 40, 1000, 110)); !ok || a.Kind != apiv1.CanarySevereRollback {
		t.Fatalf("11%% over a 5%% threshold: %+v, want severe", a)
	}
}

// TestRollbackForSeconds: the rollback condition must hold for_seconds
// (breach, then the rollback), and an evaluation without it ends the wait
// (breach_reset); min_confidence holds a rollback back while the p-value
// is not small enough.
func TestRollbackForSeconds(t *testing.T) {
	t.Parallel()
	g := relativeGroup()
	g.Analysis.Rollback.ForSeconds = 10
	c := NewController([]Group{g})
	bad, fine := window(1000, 30, 1000, 70), window(1000, 30, 1000, 40)
	for _, step := range []struct {
		at   int
		w    *Window
		kind string
	}{
		{0, bad, apiv1.CanaryBreach}, {5, bad, ""}, {6, fine, apiv1.CanaryBreachReset}, {7, bad, apiv1.CanaryBreach},
		{16, bad, ""}, {17, bad, apiv1.CanaryRollback},
	} {
		acts := c.Evaluate(at(step.at), map[string]*Window{g.Service: step.w})
		if step.kind == "" && len(acts) == 0 {
			continue
		}
		if len(acts) != 1 || acts[0].Kind != step.kind {
			t.Fatalf("t=%d: %+v, want %q", step.at, acts, step.kind)
		}
	}

	g = relativeGroup()
	g.Analysis.MinConfidence = 0.99
	s := State{CanaryWeight: 10}
	// 7 errors in 100 against 30 in 1000: p = 0.12, not below 0.01.
	if a, ok := Evaluate(at(0), g, s, window(1000, 30, 100, 7)); ok {
		t.Fatalf("p not small enough: %+v, want nothing", a)
	}
	a, ok := Evaluate(at(0), g, s, window(1000, 30, 1000, 70))
	if !ok || a.Kind != apiv1.CanaryRollback || a.RuleFigures["min_confidence"] != 0.99 || !(a.RuleFigures["p_value"] < 0.01) {
		t.Fatalf("70/1000 against 30/1000: %+v, want a rollback with p < 0.01", a)
	}
}

// TestPromoteRelative: a promotion judged relative to the baseline (no
// absolute promote threshold) happens while the canary is within the
// bound and not once it is worse.
func TestPromoteRelative(t *testing.T) {
	t.Parallel()
	g := testGroup()
	g.Analysis.CooldownSeconds = 0
	g.Analysis.Promote = config.Threshold{Metric: config.MetricErrorRate, Relative: &config.Relative{Margin: 0.005}}
	s := State{CanaryWeight: 10}
	if a, ok := Evaluate(at(0), g, s, window(1000, 20, 1000, 24)); !ok || a.Kind != apiv1.CanaryPromote || a.Rule != "promote.relative" {
		t.Fatalf("2.4%% against 2%% within 0.5%%: %+v, want a promote by promote.relative", a)
	}
	if a, ok := Evaluate(at(0), g, s, window(1000, 20, 1000, 30)); ok {
		t.Fatalf("3%% against 2%%: %+v, want nothing", a)
	}
}

// TestManagedByStandsDown: a split managed by something else is never
// acted on, however bad its canary.
func TestManagedByStandsDown(t *testing.T) {
	t.Parallel()
	g := testGroup()
	g.ManagedBy = "argo-rollouts"
	if a, ok := Evaluate(at(0), g, State{CanaryWeight: 10}, terrible); ok {
		t.Fatalf("managed split: %+v, want nothing", a)
	}
	spec := &config.Spec{Services: []config.Service{{Name: "web", Split: &config.Split{
		Targets:   []config.Target{{Upstream: "a", Weight: 9}, {Upstream: "b", Weight: 1}},
		ManagedBy: "flagger", CanaryAnalysis: &config.CanaryAnalysis{Enabled: true},
	}}}}
	if gs := Groups(spec); len(gs) != 1 || gs[0].ManagedBy != "flagger" {
		t.Errorf("Groups = %+v, want web managed by flagger", gs)
	}
}
