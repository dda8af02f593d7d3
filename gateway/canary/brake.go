package canary

import (
	"fmt"
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

// BrakeRule is the Action.Rule of a local brake.
const BrakeRule = "local_brake"

// Brake decides whether one proxy brakes group g on its own: whether it
// puts the canary, at weight in force weight on this proxy, to 0 when it
// has heard nothing from the canary runner for silent, judging w, this
// proxy's own window (not the fleet's). It brakes only when all hold:
//
//  1. the analysis is enabled, the split is not managed by something else
//     and canary_analysis.local_brake is on (config.CanaryAnalysis.Brake);
//  2. the canary is between 0 and the total, exclusive (a brake never
//     raises a weight, and a complete canary is left alone, as Evaluate
//     leaves it);
//  3. silent is at least local_brake.after_seconds;
//  4. w has at least min_requests requests of both versions together and
//     some of the canary's;
//  5. the canary's rollback metric is above the limit: twice the
//     absolute rollback threshold when there is one (Evaluate's severe
//     rule); with only rollback.relative, twice the relative bound at
//     this proxy's own baseline (the larger of baseline + margin and
//     baseline x factor, of those set), which needs baseline requests in
//     w. Comparisons are strict.
//
// The action is a severe_rollback from weight to 0, with Rule BrakeRule
// and the figures it used (canary, baseline, threshold or bound, limit,
// after_seconds, silent_seconds, requests, min_requests). A nil w, or an
// unknown metric, is never a brake. Brake is a pure function, safe for
// concurrent use.
func Brake(g Group, weight int, silent time.Duration, w *Window) (Action, bool) {
	a := g.Analysis
	after, on := a.Brake()
	if w == nil || !a.Enabled || g.ManagedBy != "" || !on {
		return Action{}, false
	}
	if weight <= 0 || weight >= g.Total {
		return Action{}, false
	}
	if silent < time.Duration(after)*time.Second {
		return Action{}, false
	}
	n := w.Baseline.Requests + w.Canary.Requests
	if n < uint64(max(a.MinRequests, 0)) || w.Canary.Requests == 0 {
		return Action{}, false
	}
	act := Action{
		Service:  g.Service,
		Kind:     apiv1.CanarySevereRollback,
		From:     weight,
		To:       0,
		Rule:     BrakeRule,
		Baseline: w.Baseline.Figures(),
		Canary:   w.Canary.Figures(),
		PValue:   PValue(w.Canary.Errors, w.Canary.Requests, w.Baseline.Errors, w.Baseline.Requests),
	}
	t := a.Rollback
	cv, ok := metricValue(t.Metric, act.Canary)
	if !ok {
		return Action{}, false
	}
	bv, _ := metricValue(t.Metric, act.Baseline)
	fig := map[string]float64{
		"canary": cv, "baseline": bv, "after_seconds": float64(after), "silent_seconds": silent.Seconds(),
		"requests": float64(n), "canary_requests": float64(w.Canary.Requests), "min_requests": float64(a.MinRequests),
	}
	var limit float64
	var what string
	switch {
	case t.Absolute():
		limit = 2 * t.Threshold
		fig["threshold"] = t.Threshold
		what = "2 x rollback threshold " + formatThreshold(t.Metric, t.Threshold)
	case w.Baseline.Requests == 0:
		return Action{}, false // nothing of its own to compare with
	default:
		bound := relativeBound(t.Relative, bv)
		limit = 2 * bound
		fig["bound"] = bound
		what = fmt.Sprintf("2 x the relative bound %s (baseline %s, %s)",
			formatValue(t.Metric, bound), formatValue(t.Metric, bv), describeRelative(t.Relative))
	}
	fig["limit"] = limit
	if !(cv > limit) {
		return Action{}, false
	}
	act.RuleFigures = fig
	act.Reason = fmt.Sprintf("local brake: no word from the canary runner for %.0f s (after_seconds %d); this proxy's own window: canary %s %s > %s over %d requests (%d of the canary)",
		silent.Seconds(), after, t.Metric, formatValue(t.Metric, cv), what, n, w.Canary.Requests)
	return act, true
}
