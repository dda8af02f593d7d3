package canary

import (
	"fmt"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// State is what the controller keeps of one group between evaluations. The
// zero value is a canary at weight 0 that never acted, holds nothing and is
// not paused. A State is a plain value.
type State struct {
	// CanaryWeight is the canary's weight in force, in [0, Total].
	CanaryWeight int
	// LastAction is when the controller last changed the weight; the zero
	// time means never.
	LastAction time.Time
	// Paused is set while an operator holds the group.
	Paused bool
	// HoldSince is when the hold at the weight in force started (the
	// first of an unbroken run of clean evaluations); zero when no hold
	// runs.
	HoldSince time.Time
	// Gate is set while a step up waits for an operator's promote.
	Gate bool
}

// Window is the figures of a group's two versions over the sliding window
// of window_seconds. The zero value is a window with no requests, on which
// nothing is ever done. A Window is a plain value.
type Window struct {
	Baseline Stats
	Canary   Stats
}

// Action is one decision of Evaluate: a weight change (promote, rollback,
// severe_rollback) or a wait (hold, hold_reset, gate: From equals To). The
// zero value is no action. An Action is a plain value.
type Action struct {
	// Service is the group's service.
	Service string
	// Kind is one of the apiv1.Canary* actions the controller writes.
	Kind string
	// From and To are the canary's weights before and after; the baseline
	// holds the rest of the total (Group.Weights).
	From int
	To   int
	// Reason says in plain words what decided, e.g. "canary error_rate
	// 0.2000 > 2 x rollback threshold 0.05 (severe)".
	Reason string
	// Baseline and Canary are the window's figures the decision was made
	// on.
	Baseline apiv1.CanaryFigures
	Canary   apiv1.CanaryFigures
	// PValue is the two-sided p-value of the pooled two-proportion z-test
	// of the canary's error rate against the baseline's (see PValue).
	PValue float64
}

// Changes reports whether a is a weight change (promote, rollback or
// severe_rollback) rather than a wait.
func (a Action) Changes() bool {
	return a.From != a.To
}

// Evaluate decides what the controller does with group g in state s at
// time now, given the window's figures w. The rules, in order:
//
//  1. a nil w, analysis disabled, or s.Paused: nothing;
//  2. the canary at (or above) the total: complete, nothing ever; the
//     canary at weight 0 (rolled back, or parked by the operator): it gets
//     no new traffic, so nothing is judged and it is never promoted back
//     on what is left in the window: an operator restarts the rollout;
//  3. less than CooldownSeconds since s.LastAction (unless it is zero):
//     nothing;
//  4. fewer than MinRequests requests of both versions together, or no
//     canary requests: not judged, which breaks a running hold
//     (hold_reset);
//  5. the canary's rollback metric above twice its threshold: a
//     severe_rollback to weight 0; else above its threshold: a rollback to
//     the step below the weight in force (Group.Below), not below 0;
//  6. else the canary's promote metric below its threshold (clean):
//     nothing while a gate waits (s.Gate); with HoldSeconds, a hold starts
//     (hold) and nothing moves until it has run HoldSeconds; then the step
//     up (Group.Above) is a promote, or a gate when Gate makes it wait for
//     an operator (GateManual: every step; GateFinal: the step to the
//     total);
//  7. else (neither): a running hold breaks (hold_reset); else nothing.
//
// Comparisons are strict: a metric equal to its threshold does nothing.
// The metrics are error_rate (errors / requests) and latency_p99 (the p99
// in seconds); a threshold naming another metric does nothing. A change
// that would leave the weight as it is (a Step of 0) is no action.
// Evaluate is a pure function, safe for concurrent use.
func Evaluate(now time.Time, g Group, s State, w *Window) (Action, bool) {
	a := g.Analysis
	if w == nil || !a.Enabled || s.Paused {
		return Action{}, false
	}
	if s.CanaryWeight >= g.Total || s.CanaryWeight <= 0 {
		return Action{}, false
	}
	cooldown := time.Duration(a.CooldownSeconds) * time.Second
	if !s.LastAction.IsZero() && now.Sub(s.LastAction) < cooldown {
		return Action{}, false
	}
	from := s.CanaryWeight
	act := Action{
		Service:  g.Service,
		From:     from,
		To:       from,
		Baseline: w.Baseline.Figures(),
		Canary:   w.Canary.Figures(),
		PValue:   PValue(w.Canary.Errors, w.Canary.Requests, w.Baseline.Errors, w.Baseline.Requests),
	}
	if n := w.Baseline.Requests + w.Canary.Requests; n < uint64(max(a.MinRequests, 0)) || w.Canary.Requests == 0 {
		return holdBroken(act, s, fmt.Sprintf("not judged: %d requests (%d of the canary), min_requests %d", n, w.Canary.Requests, a.MinRequests))
	}

	mr, ok := metricValue(a.Rollback.Metric, act.Canary)
	if !ok {
		return Action{}, false
	}
	rt := a.Rollback.Threshold
	switch {
	case mr > 2*rt:
		act.To, act.Kind = 0, apiv1.CanarySevereRollback
		act.Reason = fmt.Sprintf("canary %s %s > 2 x rollback threshold %s (severe)",
			a.Rollback.Metric, formatValue(a.Rollback.Metric, mr), formatThreshold(a.Rollback.Metric, rt))
		return act, true
	case mr > rt:
		act.To, act.Kind = g.Below(from), apiv1.CanaryRollback
		act.Reason = fmt.Sprintf("canary %s %s > rollback threshold %s",
			a.Rollback.Metric, formatValue(a.Rollback.Metric, mr), formatThreshold(a.Rollback.Metric, rt))
		return act, act.To != from
	}
	mp, ok := metricValue(a.Promote.Metric, act.Canary)
	if !ok {
		return Action{}, false
	}
	clean := fmt.Sprintf("canary %s %s < promote threshold %s",
		a.Promote.Metric, formatValue(a.Promote.Metric, mp), formatThreshold(a.Promote.Metric, a.Promote.Threshold))
	if !(mp < a.Promote.Threshold) {
		return holdBroken(act, s, fmt.Sprintf("canary %s %s not < promote threshold %s",
			a.Promote.Metric, formatValue(a.Promote.Metric, mp), formatThreshold(a.Promote.Metric, a.Promote.Threshold)))
	}
	if s.Gate {
		return Action{}, false
	}
	to := g.Above(from)
	if to == from {
		return Action{}, false
	}
	hold := time.Duration(a.HoldSeconds) * time.Second
	switch {
	case hold > 0 && s.HoldSince.IsZero():
		act.Kind = apiv1.CanaryHold
		act.Reason = fmt.Sprintf("%s: hold %d s at weight %d before the step to %d", clean, a.HoldSeconds, from, to)
		return act, true
	case hold > 0 && now.Sub(s.HoldSince) < hold:
		return Action{}, false
	case g.Gated(to):
		act.Kind = apiv1.CanaryGate
		act.Reason = fmt.Sprintf("%s: the step %d -> %d waits for an operator (gate %s): POST /api/v1/services/%s/canary/promote",
			clean, from, to, a.Gate, g.Service)
		return act, true
	}
	act.To, act.Kind, act.Reason = to, apiv1.CanaryPromote, clean
	if hold > 0 {
		act.Reason += fmt.Sprintf(", held %d s", a.HoldSeconds)
	}
	return act, true
}

// holdBroken is the hold_reset of act when s has a hold running, saying
// why (reason); else no action.
func holdBroken(act Action, s State, reason string) (Action, bool) {
	if s.HoldSince.IsZero() {
		return Action{}, false
	}
	act.Kind = apiv1.CanaryHoldReset
	act.Reason = "hold at weight " + fmt.Sprint(act.From) + " restarts: " + reason
	return act, true
}

// metricValue returns the value of the named metric in f, and false for an
// unknown metric.
func metricValue(metric string, f apiv1.CanaryFigures) (float64, bool) {
	switch metric {
	case config.MetricErrorRate:
		return f.ErrorRate, true
	case config.MetricLatencyP99:
		return f.LatencyP99, true
	}
	return 0, false
}

// formatValue formats a measured metric for a reason: four decimals, with
// an "s" for seconds.
func formatValue(metric string, v float64) string {
	if metric == config.MetricLatencyP99 {
		return fmt.Sprintf("%.4fs", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// formatThreshold formats a configured threshold as written (%g), with an
// "s" for seconds.
func formatThreshold(metric string, t float64) string {
	if metric == config.MetricLatencyP99 {
		return fmt.Sprintf("%gs", t)
	}
	return fmt.Sprintf("%g", t)
}
