package canary

import (
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// TestScheduleSteps walks the steps 1 -> 5 -> 25 -> 100 of a total of 200
// (weights 2, 10, 50, 200) with a 10 s hold, cooldown 0 and the final
// gate: a hold starts at each step, a clean evaluation before it ran 10 s
// does nothing, a bad one restarts it, the step up comes once it has run
// 10 s, and the step to 100% waits at a gate, which nothing clean or
// unjudged passes. A rollback goes to the step below, not by step.
func TestScheduleSteps(t *testing.T) {
	t.Parallel()
	g := testGroup()
	g.Total, g.Configured = 200, 2
	g.Analysis.CooldownSeconds = 0
	g.Analysis.Steps = []int{1, 5, 25, 100}
	g.Analysis.HoldSeconds = 10
	g.Analysis.Gate = config.GateFinal
	neutral := window(1000, 5, 1000, 20) // 2%: neither promote nor roll back
	c := NewController([]Group{g})
	type step struct {
		at   int
		w    *Window
		kind string // "" for no action
		to   int
	}
	for _, s := range []step{
		{0, healthy, apiv1.CanaryHold, 2},
		{5, healthy, "", 0},
		{9, healthy, "", 0},
		{10, healthy, apiv1.CanaryPromote, 10},
		{11, healthy, apiv1.CanaryHold, 10},
		{15, neutral, apiv1.CanaryHoldReset, 10},
		{16, neutral, "", 0},
		{17, healthy, apiv1.CanaryHold, 10},
		{26, window(10, 0, 10, 0), apiv1.CanaryHoldReset, 10}, // too few requests
		{27, healthy, apiv1.CanaryHold, 10},
		{37, healthy, apiv1.CanaryPromote, 50},
		{38, healthy, apiv1.CanaryHold, 50},
		{48, healthy, apiv1.CanaryGate, 50},
		{49, healthy, "", 0},
		{60, neutral, "", 0},
		{61, bad, apiv1.CanaryRollback, 10},
		{62, healthy, apiv1.CanaryHold, 10},
		{63, terrible, apiv1.CanarySevereRollback, 0},
		{64, healthy, "", 0},
	} {
		acts := c.Evaluate(at(s.at), map[string]*Window{g.Service: s.w})
		switch {
		case s.kind == "" && len(acts) != 0:
			t.Fatalf("t=%d: %+v, want nothing", s.at, acts)
		case s.kind == "":
		case len(acts) != 1 || acts[0].Kind != s.kind || acts[0].To != s.to:
			t.Fatalf("t=%d: %+v, want %s to %d", s.at, acts, s.kind, s.to)
		case acts[0].Reason == "":
			t.Errorf("t=%d: %s without a reason", s.at, s.kind)
		}
	}
}

// TestScheduleManualGate makes every step wait: a clean evaluation records
// one gate, and only State.After of an operator's promote (a weight
// change) lets the next step start its own wait.
func TestScheduleManualGate(t *testing.T) {
	t.Parallel()
	g := testGroup()
	g.Analysis.CooldownSeconds = 0
	g.Analysis.Steps = []int{10, 50, 100}
	g.Analysis.Gate = config.GateManual
	s := State{CanaryWeight: 10}
	a, ok := Evaluate(at(0), g, s, healthy)
	if !ok || a.Kind != apiv1.CanaryGate || a.From != 10 || a.To != 10 {
		t.Fatalf("first evaluation: %+v %t, want a gate at 10", a, ok)
	}
	s = s.After(a, at(0))
	if a, ok := Evaluate(at(1), g, s, healthy); ok {
		t.Fatalf("with the gate waiting: %+v, want nothing", a)
	}
	s = s.After(Action{Kind: apiv1.CanaryPromote, From: 10, To: g.Above(10)}, at(2))
	if s.Gate || s.CanaryWeight != 50 {
		t.Fatalf("after the operator's promote: %+v", s)
	}
	if a, ok := Evaluate(at(3), g, s, healthy); !ok || a.Kind != apiv1.CanaryGate || a.From != 50 {
		t.Fatalf("at 50: %+v %t, want a gate", a, ok)
	}
}

// TestGroupSteps checks Above and Below on a schedule and without one.
func TestGroupSteps(t *testing.T) {
	t.Parallel()
	g := testGroup()
	g.Analysis.Steps = []int{1, 5, 25, 100}
	for _, c := range []struct{ w, above, below int }{{0, 1, 0}, {1, 5, 0}, {3, 5, 1}, {5, 25, 1}, {25, 100, 5}, {99, 100, 25}} {
		if a, b := g.Above(c.w), g.Below(c.w); a != c.above || b != c.below {
			t.Errorf("at %d: above %d below %d, want %d and %d", c.w, a, b, c.above, c.below)
		}
	}
	g.Analysis.Steps = nil
	if a, b := g.Above(98), g.Below(3); a != 100 || b != 0 {
		t.Errorf("by step 5: above 98 = %d, below 3 = %d", a, b)
	}
}
