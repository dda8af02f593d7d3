package canary

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// base is the fake clock's origin; at(s) is s seconds after it.
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }

// testGroup is a 90/10 group of total 100, step 5, 100 requests minimum,
// 30 s cooldown, promoting below a 1% error rate and rolling back above 5%.
func testGroup() Group {
	return Group{
		Service: "checkout", Baseline: "v1", Canary: "v2", Total: 100, Configured: 10,
		Analysis: config.CanaryAnalysis{
			Enabled: true, WindowSeconds: 60, Step: 5, MinRequests: 100, CooldownSeconds: 30,
			Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
			Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
		},
	}
}

// window returns a window of the given counts, every request taking 10ms.
func window(bReq, bErr, cReq, cErr uint64) *Window {
	w := &Window{
		Baseline: Stats{Requests: bReq, Errors: bErr},
		Canary:   Stats{Requests: cReq, Errors: cErr},
	}
	w.Baseline.Latency[BucketOf(10*time.Millisecond)] = bReq
	w.Canary.Latency[BucketOf(10*time.Millisecond)] = cReq
	return w
}

// latencyWindow returns a window of 1000 error-free requests per version:
// the baseline's at 10ms, the canary's fast ones at fast and the last slow
// ones at slowD.
func latencyWindow(fast time.Duration, slow uint64, slowD time.Duration) *Window {
	w := window(1000, 0, 1000, 0)
	w.Canary.Latency = Histogram{}
	w.Canary.Latency[BucketOf(fast)] += 1000 - slow
	w.Canary.Latency[BucketOf(slowD)] += slow
	return w
}

var (
	healthy  = window(1000, 5, 1000, 1)   // canary 0.1% errors
	bad      = window(1000, 5, 1000, 70)  // canary 7%: rollback by step
	terrible = window(1000, 5, 1000, 200) // canary 20%: severe
)

// checkAction fails t unless a is a consistent action of g on w: weights
// that add up to the total on both sides, in range, and the window's
// figures and p-value.
func checkAction(t *testing.T, g Group, a Action, w *Window) {
	t.Helper()
	for _, c := range []int{a.From, a.To} {
		ws := g.Weights(c)
		if ws[0]+ws[1] != g.Total || ws[0] < 0 || ws[1] < 0 || ws[1] > g.Total {
			t.Fatalf("%+v: weights %v do not split total %d", a, ws, g.Total)
		}
	}
	if a.Service != g.Service {
		t.Fatalf("action of service %q, want %q", a.Service, g.Service)
	}
	if a.From == a.To {
		t.Fatalf("action %+v does not change the weight", a)
	}
	if a.Baseline != w.Baseline.Figures() || a.Canary != w.Canary.Figures() {
		t.Fatalf("action figures %+v / %+v differ from the window's", a.Baseline, a.Canary)
	}
	if want := PValue(w.Canary.Errors, w.Canary.Requests, w.Baseline.Errors, w.Baseline.Requests); a.PValue != want {
		t.Fatalf("action p-value %v, want %v", a.PValue, want)
	}
}

// mustAct evaluates and fails t unless there is an action of kind from
// -> to.
func mustAct(t *testing.T, now time.Time, g Group, s State, w *Window, kind string, from, to int) Action {
	t.Helper()
	a, ok := Evaluate(now, g, s, w)
	if !ok {
		t.Fatalf("no action, want %s %d -> %d", kind, from, to)
	}
	if a.Kind != kind || a.From != from || a.To != to {
		t.Fatalf("action %s %d -> %d (%s), want %s %d -> %d", a.Kind, a.From, a.To, a.Reason, kind, from, to)
	}
	checkAction(t, g, a, w)
	return a
}

// mustNotAct evaluates and fails t if there is an action.
func mustNotAct(t *testing.T, now time.Time, g Group, s State, w *Window) {
	t.Helper()
	if a, ok := Evaluate(now, g, s, w); ok {
		t.Fatalf("action %s %d -> %d (%s), want none", a.Kind, a.From, a.To, a.Reason)
	}
}

type step struct {
	at       int // seconds after base
	from, to int
}

func TestPromotionPath(t *testing.T) {
	g := testGroup()
	c := NewController([]Group{g})
	var got []step
	for sec := 0; sec <= 600; sec++ {
		for _, a := range c.Evaluate(at(sec), map[string]*Window{g.Service: healthy}) {
			if a.Kind != apiv1.CanaryPromote {
				t.Fatalf("at %ds: %s, want promote", sec, a.Kind)
			}
			checkAction(t, g, a, healthy)
			got = append(got, step{sec, a.From, a.To})
		}
	}
	// The first evaluation acts (never acted before); then one step per
	// 30 s cooldown: 18 steps of 5 from 10 to 100, at 0, 30, ..., 510.
	var want []step
	for k := 0; 10+5*k < 100; k++ {
		want = append(want, step{30 * k, 10 + 5*k, 15 + 5*k})
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("promotions (second, from, to):\n got %v\nwant %v", got, want)
	}
	s, _ := c.State(g.Service)
	if s.CanaryWeight != 100 || !s.LastAction.Equal(at(510)) {
		t.Fatalf("state %+v, want weight 100 last acted at +510s", s)
	}
	// Complete: nothing ever happens, not even on a terrible window.
	for sec := 601; sec <= 700; sec++ {
		for _, w := range []*Window{healthy, bad, terrible} {
			if a := c.Evaluate(at(sec), map[string]*Window{g.Service: w}); a != nil {
				t.Fatalf("at %ds after completion: %+v", sec, a)
			}
		}
	}
	mustNotAct(t, at(10000), g, State{CanaryWeight: 100}, terrible)
}

func TestCooldown(t *testing.T) {
	g := testGroup()
	s := State{CanaryWeight: 20, LastAction: at(100)}
	// Inside the cooldown nothing happens, to the last nanosecond.
	for _, d := range []time.Duration{0, time.Second, 29 * time.Second, 30*time.Second - 1} {
		for _, w := range []*Window{healthy, bad, terrible} {
			mustNotAct(t, at(100).Add(d), g, s, w)
		}
	}
	mustAct(t, at(130), g, s, healthy, apiv1.CanaryPromote, 20, 25)
	mustAct(t, at(130), g, s, terrible, apiv1.CanarySevereRollback, 20, 0)
	// A zero cooldown acts at once.
	g.Analysis.CooldownSeconds = 0
	mustAct(t, at(100), g, s, healthy, apiv1.CanaryPromote, 20, 25)
}

func TestRollbackByStep(t *testing.T) {
	g := testGroup()
	a := mustAct(t, at(30), g, State{CanaryWeight: 50, LastAction: at(0)}, bad, apiv1.CanaryRollback, 50, 45)
	if want := "canary error_rate 0.0700 > rollback threshold 0.05"; a.Reason != want {
		t.Fatalf("reason %q, want %q", a.Reason, want)
	}
	// A step larger than the weight stops at 0.
	mustAct(t, at(30), g, State{CanaryWeight: 3}, bad, apiv1.CanaryRollback, 3, 0)

	// Step by step down to 0, then nothing.
	c := NewController([]Group{g})
	c.SetState(g.Service, State{CanaryWeight: 15})
	var got []step
	for sec := 0; sec <= 300; sec++ {
		for _, a := range c.Evaluate(at(sec), map[string]*Window{g.Service: bad}) {
			checkAction(t, g, a, bad)
			got = append(got, step{sec, a.From, a.To})
		}
	}
	if want := []step{{0, 15, 10}, {30, 10, 5}, {60, 5, 0}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rollbacks %v, want %v", got, want)
	}
	mustNotAct(t, at(1000), g, State{CanaryWeight: 0}, bad)
}

func TestSevereRollback(t *testing.T) {
	g := testGroup()
	a := mustAct(t, at(0), g, State{CanaryWeight: 50}, terrible, apiv1.CanarySevereRollback, 50, 0)
	if want := "canary error_rate 0.2000 > 2 x rollback threshold 0.05 (severe)"; a.Reason != want {
		t.Fatalf("reason %q, want %q", a.Reason, want)
	}
	if a.PValue >= 1e-6 {
		t.Fatalf("p-value %v of 0.5%% vs 20%% over 1000 requests each, want tiny", a.PValue)
	}

	c := NewController([]Group{g})
	c.SetState(g.Service, State{CanaryWeight: 50})
	var n int
	for sec := 0; sec <= 300; sec++ {
		for _, a := range c.Evaluate(at(sec), map[string]*Window{g.Service: terrible}) {
			checkAction(t, g, a, terrible)
			if sec != 0 || a.To != 0 {
				t.Fatalf("at %ds: %s %d -> %d, want one severe rollback to 0 at 0s", sec, a.Kind, a.From, a.To)
			}
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d actions, want 1", n)
	}
	// At 0 nothing more happens: the canary gets no requests any more, and
	// while the window still holds its bad ones there is nothing to roll
	// back.
	for _, w := range []*Window{window(1000, 5, 0, 0), bad, terrible} {
		mustNotAct(t, at(1000), g, State{CanaryWeight: 0, LastAction: at(0)}, w)
	}
	// Nor is it promoted back on healthy figures left in the window (a
	// latency rollback, say, while the error rate is fine): restarting a
	// rolled-back rollout is an operator's move.
	lat := g
	lat.Analysis.Rollback = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0.5}
	mustNotAct(t, at(1000), lat, State{CanaryWeight: 0, LastAction: at(0)}, healthy)
}

func TestMinRequests(t *testing.T) {
	g := testGroup() // MinRequests 100
	s := State{CanaryWeight: 10}
	mustNotAct(t, at(0), g, s, window(50, 0, 49, 0))
	mustNotAct(t, at(0), g, s, window(0, 0, 99, 50))
	mustAct(t, at(0), g, s, window(50, 0, 50, 0), apiv1.CanaryPromote, 10, 15)
	mustAct(t, at(0), g, s, window(50, 0, 50, 20), apiv1.CanarySevereRollback, 10, 0)
	// No canary requests: nothing to judge.
	mustNotAct(t, at(0), g, s, window(100000, 0, 0, 0))
	g.Analysis.MinRequests = 0
	mustNotAct(t, at(0), g, s, window(0, 0, 0, 0))
	mustAct(t, at(0), g, s, window(0, 0, 1, 0), apiv1.CanaryPromote, 10, 15)
}

func TestDisabledAndPaused(t *testing.T) {
	g := testGroup()
	g.Analysis.Enabled = false
	for _, w := range []*Window{healthy, bad, terrible} {
		mustNotAct(t, at(0), g, State{CanaryWeight: 50}, w)
	}

	g = testGroup()
	for _, w := range []*Window{healthy, bad, terrible} {
		mustNotAct(t, at(0), g, State{CanaryWeight: 50, Paused: true}, w)
	}
	mustNotAct(t, at(0), g, State{CanaryWeight: 50}, nil)

	c := NewController([]Group{g})
	c.SetState(g.Service, State{CanaryWeight: 50, Paused: true})
	for sec := 0; sec < 100; sec++ {
		if a := c.Evaluate(at(sec), map[string]*Window{g.Service: terrible}); a != nil {
			t.Fatalf("paused group acted at %ds: %+v", sec, a)
		}
	}
	c.SetState(g.Service, State{CanaryWeight: 50})
	if a := c.Evaluate(at(100), map[string]*Window{g.Service: terrible}); len(a) != 1 || a[0].To != 0 {
		t.Fatalf("resumed group: %+v, want a severe rollback to 0", a)
	}
}

func TestLatencyPromote(t *testing.T) {
	g := testGroup()
	g.Analysis.Promote = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0.2}
	s := State{CanaryWeight: 10}

	w := latencyWindow(100*time.Millisecond, 0, 0)
	a := mustAct(t, at(0), g, s, w, apiv1.CanaryPromote, 10, 15)
	p99 := BucketValue(BucketOf(100 * time.Millisecond)).Seconds()
	if want := fmt.Sprintf("canary latency_p99 %.4fs < promote threshold 0.2s", p99); a.Reason != want {
		t.Fatalf("reason %q, want %q", a.Reason, want)
	}
	// 10 slow requests of 1000 are above the p99 (the 990th): promote.
	mustAct(t, at(0), g, s, latencyWindow(100*time.Millisecond, 10, 5*time.Second), apiv1.CanaryPromote, 10, 15)
	// 11 slow requests reach the p99: nothing (error rate 0 is no rollback).
	mustNotAct(t, at(0), g, s, latencyWindow(100*time.Millisecond, 11, 5*time.Second))
	mustNotAct(t, at(0), g, s, latencyWindow(300*time.Millisecond, 0, 0))
	// The rollback metric (error rate) still rules over a fast canary.
	mustAct(t, at(0), g, s, func() *Window {
		w := latencyWindow(time.Millisecond, 0, 0)
		w.Canary.Errors = 200
		return w
	}(), apiv1.CanarySevereRollback, 10, 0)
}

func TestLatencyRollback(t *testing.T) {
	g := testGroup()
	g.Analysis.Rollback = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0.5}
	s := State{CanaryWeight: 40}

	// Error-free but slow: rollback by step.
	a := mustAct(t, at(0), g, s, latencyWindow(600*time.Millisecond, 0, 0), apiv1.CanaryRollback, 40, 35)
	p99 := BucketValue(BucketOf(600 * time.Millisecond)).Seconds()
	if want := fmt.Sprintf("canary latency_p99 %.4fs > rollback threshold 0.5s", p99); a.Reason != want {
		t.Fatalf("reason %q, want %q", a.Reason, want)
	}
	// Above 2 x 0.5s: severe.
	a = mustAct(t, at(0), g, s, latencyWindow(1200*time.Millisecond, 0, 0), apiv1.CanarySevereRollback, 40, 0)
	if !strings.Contains(a.Reason, "latency_p99") || !strings.Contains(a.Reason, "(severe)") {
		t.Fatalf("reason %q does not name latency_p99 and severity", a.Reason)
	}
	// Only the tail counts: 10 slow requests of 1000 stay above the p99,
	// and the fast, error-free canary is promoted on its error rate; 11
	// reach the p99 and roll it back.
	mustAct(t, at(0), g, s, latencyWindow(10*time.Millisecond, 10, 700*time.Millisecond), apiv1.CanaryPromote, 40, 45)
	mustAct(t, at(0), g, s, latencyWindow(10*time.Millisecond, 11, 700*time.Millisecond), apiv1.CanaryRollback, 40, 35)
}

func TestStrictBoundaries(t *testing.T) {
	g := testGroup() // promote < 0.01, rollback > 0.05, severe > 0.10
	s := State{CanaryWeight: 50}
	// Exactly the rollback threshold: no rollback, and not below promote.
	mustNotAct(t, at(0), g, s, window(1000, 0, 1000, 50))
	// Exactly twice the rollback threshold: a rollback by step, not severe.
	mustAct(t, at(0), g, s, window(1000, 0, 1000, 100), apiv1.CanaryRollback, 50, 45)
	mustAct(t, at(0), g, s, window(1000, 0, 1000, 101), apiv1.CanarySevereRollback, 50, 0)
	mustAct(t, at(0), g, s, window(1000, 0, 1000, 51), apiv1.CanaryRollback, 50, 45)
	// Exactly the promote threshold: nothing; just below: promote.
	mustNotAct(t, at(0), g, s, window(1000, 0, 1000, 10))
	mustAct(t, at(0), g, s, window(1000, 0, 1000, 9), apiv1.CanaryPromote, 50, 55)

	// The same with latency, whose thresholds are set to the very value
	// the histogram reports.
	p99 := BucketValue(BucketOf(200 * time.Millisecond)).Seconds()
	w := latencyWindow(200*time.Millisecond, 0, 0)
	lg := testGroup()
	lg.Analysis.Promote = config.Threshold{Metric: config.MetricLatencyP99, Threshold: p99}
	mustNotAct(t, at(0), lg, s, w)
	lg.Analysis.Promote.Threshold = p99 * 1.0001
	mustAct(t, at(0), lg, s, w, apiv1.CanaryPromote, 50, 55)

	lg = testGroup()
	lg.Analysis.Promote = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0} // never promotes
	lg.Analysis.Rollback = config.Threshold{Metric: config.MetricLatencyP99, Threshold: p99}
	mustNotAct(t, at(0), lg, s, w)
	lg.Analysis.Rollback.Threshold = p99 / 2 // p99 == 2 x threshold exactly
	mustAct(t, at(0), lg, s, w, apiv1.CanaryRollback, 50, 45)
	lg.Analysis.Rollback.Threshold = p99 / 2.0001
	mustAct(t, at(0), lg, s, w, apiv1.CanarySevereRollback, 50, 0)
}

func TestPromoteStopsAtTotal(t *testing.T) {
	g := testGroup()
	a := mustAct(t, at(0), g, State{CanaryWeight: 98}, healthy, apiv1.CanaryPromote, 98, 100)
	if want := "canary error_rate 0.0010 < promote threshold 0.01"; a.Reason != want {
		t.Fatalf("reason %q, want %q", a.Reason, want)
	}
}

func TestNothingToChange(t *testing.T) {
	g := testGroup()
	// A step of 0 moves nothing.
	g.Analysis.Step = 0
	for _, w := range []*Window{healthy, bad} {
		mustNotAct(t, at(0), g, State{CanaryWeight: 50}, w)
	}
	// An unknown metric judges nothing.
	g = testGroup()
	g.Analysis.Rollback.Metric = "cpu"
	mustNotAct(t, at(0), g, State{CanaryWeight: 50}, terrible)
	g = testGroup()
	g.Analysis.Promote.Metric = "cpu"
	mustNotAct(t, at(0), g, State{CanaryWeight: 50}, healthy)
}
