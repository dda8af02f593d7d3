package canary

import (
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

func TestBrake(t *testing.T) {
	t.Parallel()
	silent := 11 * time.Second // the default after_seconds is 10
	relative := func(g Group) Group {
		g.Analysis.Rollback = config.Threshold{Metric: config.MetricErrorRate, Relative: &config.Relative{Margin: 0.01, Factor: 2}}
		return g
	}
	tests := []struct {
		name   string
		group  func(Group) Group
		weight int
		silent time.Duration
		w      *Window
		want   bool
	}{
		{name: "silent and over twice the threshold", weight: 10, silent: silent, w: window(1000, 5, 1000, 101), want: true},
		{name: "at twice the threshold exactly", weight: 10, silent: silent, w: window(1000, 5, 1000, 100)},
		{name: "over the threshold, not twice", weight: 10, silent: silent, w: bad},
		{name: "runner heard recently", weight: 10, silent: 9 * time.Second, w: terrible},
		{name: "runner heard just now", weight: 10, silent: 0, w: terrible},
		{name: "silent exactly after_seconds", weight: 10, silent: 10 * time.Second, w: terrible, want: true},
		{name: "below min_requests", weight: 10, silent: silent, w: window(40, 0, 59, 59)},
		{name: "min_requests reached", weight: 10, silent: silent, w: window(40, 0, 60, 60), want: true},
		{name: "no canary requests", weight: 10, silent: silent, w: window(1000, 900, 0, 0)},
		{name: "nil window", weight: 10, silent: silent, w: nil},
		{name: "canary already at 0", weight: 0, silent: silent, w: terrible},
		{name: "canary complete", weight: 100, silent: silent, w: terrible},
		{name: "analysis disabled", group: func(g Group) Group { g.Analysis.Enabled = false; return g }, weight: 10, silent: silent, w: terrible},
		{name: "managed by something else", group: func(g Group) Group { g.ManagedBy = "argo-rollouts"; return g }, weight: 10, silent: silent, w: terrible},
		{name: "brake off", group: func(g Group) Group {
			g.Analysis.LocalBrake = &config.LocalBrake{Enabled: new(false)}
			return g
		}, weight: 10, silent: time.Hour, w: terrible},
		{name: "after_seconds 60, silent 59 s", group: func(g Group) Group {
			g.Analysis.LocalBrake = &config.LocalBrake{AfterSeconds: new(60)}
			return g
		}, weight: 10, silent: 59 * time.Second, w: terrible},
		{name: "after_seconds 60, silent 61 s", group: func(g Group) Group {
			g.Analysis.LocalBrake = &config.LocalBrake{AfterSeconds: new(60)}
			return g
		}, weight: 10, silent: 61 * time.Second, w: terrible, want: true},
		// relative only: twice the bound max(0.005 + 0.01, 0.005 x 2) = 0.015, so 0.03.
		{name: "relative only, over twice the bound", group: relative, weight: 10, silent: silent, w: window(1000, 5, 1000, 31), want: true},
		{name: "relative only, under twice the bound", group: relative, weight: 10, silent: silent, w: window(1000, 5, 1000, 29)},
		{name: "relative only, no baseline of its own", group: relative, weight: 10, silent: silent, w: window(0, 0, 1000, 900)},
		{name: "latency over twice the threshold", group: func(g Group) Group {
			g.Analysis.Rollback = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0.5}
			return g
		}, weight: 10, silent: silent, w: latencyWindow(10*time.Millisecond, 20, 1500*time.Millisecond), want: true},
		{name: "latency under twice the threshold", group: func(g Group) Group {
			g.Analysis.Rollback = config.Threshold{Metric: config.MetricLatencyP99, Threshold: 0.5}
			return g
		}, weight: 10, silent: silent, w: latencyWindow(10*time.Millisecond, 20, 900*time.Millisecond)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := testGroup()
			if tc.group != nil {
				g = tc.group(g)
			}
			a, ok := Brake(g, tc.weight, tc.silent, tc.w)
			if ok != tc.want {
				t.Fatalf("Brake = %+v, %v; want a brake: %v", a, ok, tc.want)
			}
			if !ok {
				if a.Kind != "" || a.To != 0 || a.From != 0 {
					t.Errorf("no brake, but an action: %+v", a)
				}
				return
			}
			if a.Kind != apiv1.CanarySevereRollback || a.From != tc.weight || a.To != 0 || a.Rule != BrakeRule || a.Service != g.Service {
				t.Errorf("brake = %s %d -> %d rule %q of %q; want severe_rollback %d -> 0 rule %q of %q",
					a.Kind, a.From, a.To, a.Rule, a.Service, tc.weight, BrakeRule, g.Service)
			}
			if !strings.Contains(a.Reason, "local brake") || !(a.RuleFigures["canary"] > a.RuleFigures["limit"]) {
				t.Errorf("reason %q, figures %v: want the figures it used", a.Reason, a.RuleFigures)
			}
			if a.Canary.Requests != int64(tc.w.Canary.Requests) {
				t.Errorf("canary figures %+v, want the window's", a.Canary)
			}
		})
	}
}

// A brake only ever lowers the weight to 0: over every weight and window,
// it never promotes and never raises a weight.
func TestBrakeNeverPromotes(t *testing.T) {
	t.Parallel()
	g := testGroup()
	windows := []*Window{healthy, bad, terrible, window(1000, 0, 1000, 0), window(0, 0, 1000, 1000)}
	for w := -1; w <= g.Total+1; w++ {
		for _, win := range windows {
			for _, silent := range []time.Duration{0, 5 * time.Second, time.Minute} {
				a, ok := Brake(g, w, silent, win)
				if !ok {
					continue
				}
				if a.To != 0 || a.From != w || a.To >= a.From || a.Kind == apiv1.CanaryPromote {
					t.Fatalf("weight %d, silent %v: %+v is not a brake to 0", w, silent, a)
				}
			}
		}
	}
	// A healthy canary is never braked, however long the runner is silent.
	if a, ok := Brake(g, 10, time.Hour, healthy); ok {
		t.Errorf("healthy canary braked: %+v", a)
	}
}
