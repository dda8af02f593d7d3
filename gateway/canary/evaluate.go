package canary

import (
	"fmt"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// State is what the controller keeps of one group between evaluations. The
// zero value is a canary at weight 0 that never acted and is not paused. A
// State is a plain value.
type State struct {
	// CanaryWeight is the canary's weight in force, in [0, Total].
	CanaryWeight int
	// LastAction is when the controller last changed the weight; the zero
	// time means never.
	LastAction time.Time
	// Paused is set while an operator holds the group.
	Paused bool
}

// Window is the figures of a group's two versions over the sliding window
// of window_seconds. The zero value is a window with no requests, on which
// nothing is ever done. A Window is a plain value.
type Window struct {
	Baseline Stats
	Canary   Stats
}

// Action is one weight change decided by Evaluate. The zero value is no
// action. An Action is a plain value.
type Action struct {
	// Service is the group's service.
	Service string
	// Kind is apiv1.CanaryPromote, apiv1.CanaryRollback or
	// apiv1.CanarySevereRollback.
	Kind string
	// From and To are the canary's weights before and after; the baseline
	// holds the rest of the total (Group.Weights).
	From int
	To   int
	// Reason says in plain words which metric of the canary crossed which
	// threshold, e.g. "canary error_rate 0.2000 > 2 x rollback threshold
	// 0.05 (severe)".
	Reason string
	// Baseline and Canary are the window's figures the decision was made
	// on.
	Baseline apiv1.CanaryFigures
	Canary   apiv1.CanaryFigures
	// PValue is the two-sided p-value of the pooled two-proportion z-test
	// of the canary's error rate against the baseline's (see PValue).
	PValue float64
}

// Evaluate decides what the controller does with group g in state s at
// time now, given the window's figures w. The rules, in order:
//
//  1. a nil w, analysis disabled, or s.Paused: nothing;
//  2. the canary at (or above) the total: complete, nothing ever; the
//     canary at weight 0 (rolled back, or parked by the operator): it gets
//     no new traffic, so nothing is judged and it is never promoted back
//     on what is left in the window: an operator restarts the rollout;
//  3. fewer than MinRequests requests of both versions together: nothing;
//  4. no canary requests: nothing (nothing to judge);
//  5. less than CooldownSeconds since s.LastAction (unless it is zero):
//     nothing;
//  6. the canary's rollback metric above twice its threshold: a
//     severe_rollback to weight 0; else above its threshold: a rollback of
//     one Step, not below 0;
//  7. else the canary's promote metric below its threshold: a promote of
//     one Step, not above the total;
//  8. else nothing.
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
	if w.Baseline.Requests+w.Canary.Requests < uint64(max(a.MinRequests, 0)) {
		return Action{}, false
	}
	if w.Canary.Requests == 0 {
		return Action{}, false
	}
	cooldown := time.Duration(a.CooldownSeconds) * time.Second
	if !s.LastAction.IsZero() && now.Sub(s.LastAction) < cooldown {
		return Action{}, false
	}

	bf, cf := w.Baseline.Figures(), w.Canary.Figures()
	from := s.CanaryWeight
	var to int
	var kind, reason string

	mr, ok := metricValue(a.Rollback.Metric, cf)
	if !ok {
		return Action{}, false
	}
	rt := a.Rollback.Threshold
	switch {
	case mr > 2*rt:
		if from <= 0 {
			return Action{}, false
		}
		to, kind = 0, apiv1.CanarySevereRollback
		reason = fmt.Sprintf("canary %s %s > 2 x rollback threshold %s (severe)",
			a.Rollback.Metric, formatValue(a.Rollback.Metric, mr), formatThreshold(a.Rollback.Metric, rt))
	case mr > rt:
		if from <= 0 {
			return Action{}, false
		}
		to, kind = max(0, from-a.Step), apiv1.CanaryRollback
		reason = fmt.Sprintf("canary %s %s > rollback threshold %s",
			a.Rollback.Metric, formatValue(a.Rollback.Metric, mr), formatThreshold(a.Rollback.Metric, rt))
	default:
		mp, ok := metricValue(a.Promote.Metric, cf)
		if !ok || !(mp < a.Promote.Threshold) {
			return Action{}, false
		}
		to, kind = min(g.Total, from+a.Step), apiv1.CanaryPromote
		reason = fmt.Sprintf("canary %s %s < promote threshold %s",
			a.Promote.Metric, formatValue(a.Promote.Metric, mp), formatThreshold(a.Promote.Metric, a.Promote.Threshold))
	}
	if to == from {
		return Action{}, false
	}
	return Action{
		Service:  g.Service,
		Kind:     kind,
		From:     from,
		To:       to,
		Reason:   reason,
		Baseline: bf,
		Canary:   cf,
		PValue:   PValue(w.Canary.Errors, w.Canary.Requests, w.Baseline.Errors, w.Baseline.Requests),
	}, true
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
