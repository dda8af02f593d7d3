package db_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
)

// TestCanaryCarryOver publishes three generations: the second keeps the
// key of group api (and gives web a new one), the third changes api's.
// The second carries api's canary over: its weight in force, last event
// and window rows of the first generation, and a gate waiting there, which
// PassCanaryGate passes; the third starts api afresh: no state, an empty
// window, no gate (ErrNoGate).
func TestCanaryCarryOver(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	pub := func(n int, keys map[string]string) int64 {
		t.Helper()
		g, err := s.Publish(ctx, db.PublishParams{Spec: spec(n), Author: "test", CanaryKeys: keys})
		if err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	g1 := pub(1, map[string]string{"api": "k1", "web": "w1"})
	l := lockCanary(t, s)
	pe := controllerAction(g1, "api", apiv1.CanaryPromote, 10, 20)
	pe.Rule, pe.RuleFigures = "promote.threshold", map[string]float64{"canary": 0.001, "bound": math.Inf(1)}
	promoted := record(t, l, pe, 10)
	if promoted.Rule != "promote.threshold" || len(promoted.RuleFigures) != 1 || promoted.RuleFigures["canary"] != 0.001 {
		t.Errorf("stored rule %q, figures %v; want the rule and the finite figure only", promoted.Rule, promoted.RuleFigures)
	}
	e := controllerAction(g1, "api", apiv1.CanaryGate, 20, 20)
	gate := record(t, l, e, 10)
	if err := s.FlushCanaryWindows(ctx, "gw-1", []db.CanaryWindowRow{
		{Generation: g1, Service: "api", Version: db.VersionCanary, Requests: 40, Errors: 1},
	}); err != nil {
		t.Fatal(err)
	}

	g2 := pub(2, map[string]string{"api": "k1", "web": "w2"})
	states, err := s.CanaryStates(ctx, g2)
	if err != nil {
		t.Fatal(err)
	}
	if st := states["api"]; !st.Transient || st.Weight != 20 || !st.Gate || st.LastEvent == nil || st.LastEvent.ID != gate.ID ||
		!st.LastAction.Equal(promoted.CreatedAt) {
		t.Errorf("api in generation %d = %+v, want weight 20 and the gate carried over", g2, st)
	}
	if _, c, _, err := s.CanaryWindow(ctx, g2, "api", time.Hour); err != nil || c.Requests != 40 || c.Errors != 1 {
		t.Errorf("api's window in generation %d = %+v, %v; want the 40 requests of generation %d", g2, c, err, g1)
	}
	// The runner's compare-and-set sees the carried weight too.
	if _, ok, err := l.Record(ctx, controllerAction(g2, "api", apiv1.CanaryPromote, 10, 30), 10); ok || err != nil {
		t.Errorf("a promote from the configured weight, not the carried one: recorded %t, %v", ok, err)
	}
	passed, err := s.PassCanaryGate(ctx, g2, "api", 20, 50, 10, "alice", "go")
	if err != nil || passed.Action != apiv1.CanaryPromote || passed.Actor != "alice" || passed.GenerationID != g2 {
		t.Fatalf("PassCanaryGate = %+v, %v", passed, err)
	}
	if _, err := s.PassCanaryGate(ctx, g2, "api", 50, 100, 10, "alice", "again"); !errors.Is(err, db.ErrNoGate) {
		t.Errorf("a second pass = %v, want ErrNoGate", err)
	}

	g3 := pub(3, map[string]string{"api": "k2", "web": "w2"})
	if states, err = s.CanaryStates(ctx, g3); err != nil {
		t.Fatal(err)
	}
	if st, ok := states["api"]; ok {
		t.Errorf("api in generation %d = %+v, want none (afresh)", g3, st)
	}
	if _, c, _, err := s.CanaryWindow(ctx, g3, "api", time.Hour); err != nil || c.Requests != 0 {
		t.Errorf("api's window in generation %d = %+v, %v; want empty", g3, c, err)
	}
}
