package canary

import (
	"fmt"
	"math"
	"strings"
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
	// BreachSince is when the rollback condition started to hold
	// (rollback.for_seconds); zero when it does not.
	BreachSince time.Time
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
	// Rule names the canary_analysis rule that decided (e.g.
	// "rollback.relative", "promote.threshold", "hold_seconds", "gate",
	// "min_requests"); RuleFigures are the figures it used (e.g. canary,
	// baseline, threshold, bound, margin, factor, p_value,
	// min_confidence, hold_seconds, for_seconds).
	Rule        string
	RuleFigures map[string]float64
}

// Changes reports whether a is a weight change (promote, rollback or
// severe_rollback) rather than a wait.
func (a Action) Changes() bool {
	return a.From != a.To
}

// Evaluate decides what the controller does with group g in state s at
// time now, given the window's figures w. The rules, in order:
//
//  1. a nil w, analysis disabled, s.Paused, or the split managed by
//     something else (Group.ManagedBy): nothing;
//  2. the canary at (or above) the total: complete, nothing ever; the
//     canary at weight 0 (rolled back, or parked by the operator): it gets
//     no new traffic, so nothing is judged and it is never promoted back
//     on what is left in the window: an operator restarts the rollout;
//  3. less than CooldownSeconds since s.LastAction (unless it is zero):
//     nothing;
//  4. fewer than MinRequests requests of both versions together, or no
//     canary requests: not judged, which breaks a running hold
//     (hold_reset);
//  5. severe: the canary's rollback metric above twice an absolute
//     rollback threshold: a severe_rollback to weight 0, at once;
//  6. the rollback condition: the metric above the absolute threshold, or
//     worse than the baseline's by rollback.relative (with baseline
//     requests to compare with). With rollback.for_seconds it must hold
//     that long first (a breach event starts the wait; an evaluation
//     without it ends it, breach_reset); with min_confidence the p-value
//     must be below 1 - min_confidence, else nothing; then a rollback to
//     the step below the weight in force (Group.Below), not below 0;
//  7. else clean: the promote metric below an absolute promote threshold
//     (when set) and not worse than the baseline's by promote.relative
//     (when set): nothing while a gate waits (s.Gate); with HoldSeconds, a
//     hold starts (hold) and nothing moves until it has run HoldSeconds;
//     then the step up (Group.Above) is a promote, or a gate when Gate
//     makes it wait for an operator (GateManual: every step; GateFinal:
//     the step to the total);
//  8. else (neither): a running hold breaks (hold_reset); else nothing.
//
// Every action names the rule that decided (Action.Rule) and the figures
// it used. Comparisons are strict: a metric equal to its bound does
// nothing. The metrics are error_rate (errors / requests) and latency_p99
// (the p99 in seconds); a threshold naming another metric does nothing. A
// change that would leave the weight as it is (a Step of 0) is no action.
// Evaluate is a pure function, safe for concurrent use.
func Evaluate(now time.Time, g Group, s State, w *Window) (Action, bool) {
	a := g.Analysis
	if w == nil || !a.Enabled || s.Paused || g.ManagedBy != "" {
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
		fig := map[string]float64{"requests": float64(n), "canary_requests": float64(w.Canary.Requests), "min_requests": float64(a.MinRequests)}
		return holdBroken(act, s, "min_requests", fig,
			fmt.Sprintf("not judged: %d requests (%d of the canary), min_requests %d", n, w.Canary.Requests, a.MinRequests))
	}

	rb, ok := judge("rollback", a.Rollback, act.Canary, act.Baseline, w.Baseline.Requests > 0)
	if !ok {
		return Action{}, false
	}
	if rb.severe {
		act.To, act.Kind, act.Rule, act.RuleFigures = 0, apiv1.CanarySevereRollback, "rollback.threshold", rb.figures
		act.Reason = fmt.Sprintf("canary %s %s > 2 x rollback threshold %s (severe)",
			a.Rollback.Metric, formatValue(a.Rollback.Metric, rb.figures["canary"]), formatThreshold(a.Rollback.Metric, a.Rollback.Threshold))
		return act, true
	}
	if rb.worse {
		return rollback(now, g, s, act, rb)
	}
	if !s.BreachSince.IsZero() {
		act.Kind, act.Rule, act.RuleFigures = apiv1.CanaryBreachReset, "rollback.for_seconds", rb.figures
		act.Reason = "rollback condition no longer holds: " + rb.text
		return act, true
	}
	pr, ok := judge("promote", a.Promote, act.Canary, act.Baseline, w.Baseline.Requests > 0)
	if !ok {
		return Action{}, false
	}
	if !pr.clean {
		return holdBroken(act, s, pr.rule, pr.figures, pr.text)
	}
	if s.Gate {
		return Action{}, false
	}
	to := g.Above(from)
	if to == from {
		return Action{}, false
	}
	act.Rule, act.RuleFigures = pr.rule, pr.figures
	hold := time.Duration(a.HoldSeconds) * time.Second
	switch {
	case hold > 0 && s.HoldSince.IsZero():
		act.Kind, act.Rule = apiv1.CanaryHold, "hold_seconds"
		act.RuleFigures["hold_seconds"] = float64(a.HoldSeconds)
		act.Reason = fmt.Sprintf("%s: hold %d s at weight %d before the step to %d", pr.text, a.HoldSeconds, from, to)
		return act, true
	case hold > 0 && now.Sub(s.HoldSince) < hold:
		return Action{}, false
	case g.Gated(to):
		act.Kind, act.Rule = apiv1.CanaryGate, "gate"
		act.Reason = fmt.Sprintf("%s: the step %d -> %d waits for an operator (gate %s): POST /api/v1/services/%s/canary/promote",
			pr.text, from, to, a.Gate, g.Service)
		return act, true
	}
	act.To, act.Kind, act.Reason = to, apiv1.CanaryPromote, pr.text
	if hold > 0 {
		act.Reason += fmt.Sprintf(", held %d s", a.HoldSeconds)
		act.RuleFigures["hold_seconds"] = float64(a.HoldSeconds)
	}
	return act, true
}

// rollback is the step of Evaluate where the rollback condition rb holds
// (not severe): wait for rollback.for_seconds, then check min_confidence,
// then roll back to the step below.
func rollback(now time.Time, g Group, s State, act Action, rb verdict) (Action, bool) {
	a := g.Analysis
	act.RuleFigures = rb.figures
	if sustain := time.Duration(a.Rollback.ForSeconds) * time.Second; sustain > 0 {
		act.RuleFigures["for_seconds"] = float64(a.Rollback.ForSeconds)
		if s.BreachSince.IsZero() {
			act.Kind, act.Rule = apiv1.CanaryBreach, "rollback.for_seconds"
			act.Reason = fmt.Sprintf("%s: rolling back if it holds %d s", rb.text, a.Rollback.ForSeconds)
			return act, true
		}
		if now.Sub(s.BreachSince) < sustain {
			return Action{}, false
		}
	}
	reason := rb.text
	if mc := a.MinConfidence; mc > 0 {
		act.RuleFigures["min_confidence"] = mc
		act.RuleFigures["p_value"] = act.PValue
		if !(act.PValue < 1-mc) {
			return holdBroken(act, s, "min_confidence", act.RuleFigures,
				fmt.Sprintf("%s, but p = %.3g is not below %g (min_confidence %g): no rollback yet", rb.text, act.PValue, 1-mc, mc))
		}
		reason += fmt.Sprintf(", p = %.3g < %g", act.PValue, 1-mc)
	}
	if a.Rollback.ForSeconds > 0 {
		reason += fmt.Sprintf(", for %d s", a.Rollback.ForSeconds)
	}
	act.To, act.Kind, act.Rule, act.Reason = g.Below(act.From), apiv1.CanaryRollback, rb.rule, reason
	return act, act.To != act.From
}

// holdBroken is the hold_reset of act when s has a hold running, saying
// why (rule, its figures and reason); else no action.
func holdBroken(act Action, s State, rule string, figures map[string]float64, reason string) (Action, bool) {
	if s.HoldSince.IsZero() {
		return Action{}, false
	}
	act.Kind, act.Rule, act.RuleFigures = apiv1.CanaryHoldReset, rule, figures
	act.Reason = "hold at weight " + fmt.Sprint(act.From) + " restarts: " + reason
	return act, true
}

// verdict is how one threshold (promote or rollback) judged the canary:
// worse (the rollback condition: the absolute bound crossed, or worse than
// the baseline by the relative one), severe (over twice the absolute
// bound), clean (the promote condition: under the absolute bound and not
// worse by the relative one); the rule that decided, the figures it used
// and the words for it.
type verdict struct {
	worse, severe, clean bool
	rule, text           string
	figures              map[string]float64
}

// judge applies t, the threshold named prefix ("promote" or "rollback"),
// to the canary's figures c against the baseline's b; a relative bound is
// only judged when haveBaseline (a relative-only threshold with no
// baseline requests is neither worse nor clean). It returns false for an
// unknown metric.
func judge(prefix string, t config.Threshold, c, b apiv1.CanaryFigures, haveBaseline bool) (verdict, bool) {
	cv, ok := metricValue(t.Metric, c)
	if !ok {
		return verdict{}, false
	}
	bv, _ := metricValue(t.Metric, b)
	m := t.Metric
	v := verdict{figures: map[string]float64{"canary": cv, "baseline": bv}, clean: true}
	var notes, rules []string
	absWorse := false
	if t.Absolute() {
		v.figures["threshold"] = t.Threshold
		v.severe = cv > 2*t.Threshold
		absWorse = cv > t.Threshold
		v.worse, v.clean = absWorse, cv < t.Threshold
		rules = append(rules, "threshold")
		notes = append(notes, fmt.Sprintf("canary %s %s %s %s threshold %s", m, formatValue(m, cv), compare(cv, t.Threshold), prefix, formatThreshold(m, t.Threshold)))
	}
	if r := t.Relative; r != nil {
		rules = append(rules, "relative")
		if !haveBaseline {
			v.clean = false
			notes = append(notes, "no baseline requests to judge the relative bound against")
		} else {
			bound := relativeBound(r, bv)
			v.figures["bound"] = bound
			if r.Margin > 0 {
				v.figures["margin"] = r.Margin
			}
			if r.Factor > 0 {
				v.figures["factor"] = r.Factor
			}
			worse := r.Worse(cv, bv)
			v.worse, v.clean = v.worse || worse, v.clean && !worse
			how := "within"
			if worse {
				how = "worse than"
			}
			notes = append(notes, fmt.Sprintf("canary %s %s %s the baseline's %s by %s (bound %s)",
				m, formatValue(m, cv), how, formatValue(m, bv), describeRelative(r), formatValue(m, bound)))
		}
	}
	switch {
	case v.worse && absWorse:
		v.rule = prefix + ".threshold"
	case v.worse:
		v.rule = prefix + ".relative"
	default:
		v.rule = prefix + "." + strings.Join(rules, "+")
	}
	v.text = strings.Join(notes, "; ")
	return v, true
}

// compare is the comparison of a value with its bound in words: ">", "<",
// or "=" when equal (strict comparisons: equal is neither).
func compare(v, bound float64) string {
	switch {
	case v > bound:
		return ">"
	case v < bound:
		return "<"
	}
	return "="
}

// relativeBound is the value above which a canary is worse than a
// baseline at b by r: the larger of b + Margin and b x Factor, of those
// set.
func relativeBound(r *config.Relative, b float64) float64 {
	bound := math.Inf(-1)
	if r.Margin > 0 {
		bound = b + r.Margin
	}
	if r.Factor > 0 {
		bound = max(bound, b*r.Factor)
	}
	return bound
}

// describeRelative says which relative bounds r sets, e.g. "margin 0.005
// and factor 2".
func describeRelative(r *config.Relative) string {
	var parts []string
	if r.Margin > 0 {
		parts = append(parts, fmt.Sprintf("margin %g", r.Margin))
	}
	if r.Factor > 0 {
		parts = append(parts, fmt.Sprintf("factor %g", r.Factor))
	}
	return strings.Join(parts, " and ")
}

// metricValue returns the value of the named metric in f, and false for an
// unknown metric.
func metricValue(metric string, f apiv1.CanaryFigures) (float64, bool) {
	switch metric {
	case config.MetricErrorRate:
		return f.ErrorRate, true
	case config.MetricLatencyP99:
		return f.LatencyP99, true
	case config.MetricTTFTP99:
		return f.TTFTP99, true
	}
	return 0, false
}

// formatValue formats a measured metric for a reason: four decimals, with
// an "s" for seconds.
func formatValue(metric string, v float64) string {
	if metric == config.MetricLatencyP99 || metric == config.MetricTTFTP99 {
		return fmt.Sprintf("%.4fs", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// formatThreshold formats a configured threshold as written (%g), with an
// "s" for seconds.
func formatThreshold(metric string, t float64) string {
	if metric == config.MetricLatencyP99 || metric == config.MetricTTFTP99 {
		return fmt.Sprintf("%gs", t)
	}
	return fmt.Sprintf("%g", t)
}
