package canary

import (
	"testing"

	"github.com/dwara/dwara/api/apiv1"
)

func TestControllerState(t *testing.T) {
	a, b := testGroup(), testGroup()
	b.Service, b.Configured = "search", 0
	c := NewController([]Group{a, b})
	for _, g := range []Group{a, b} {
		s, ok := c.State(g.Service)
		if !ok || s != (State{CanaryWeight: g.Configured}) {
			t.Fatalf("State(%q) = %+v, %v; want weight %d, never acted, running", g.Service, s, ok, g.Configured)
		}
	}
	if _, ok := c.State("nope"); ok {
		t.Fatal("State of an unknown service reported ok")
	}
	c.SetState("nope", State{CanaryWeight: 7}) // ignored
	if _, ok := c.State("nope"); ok {
		t.Fatal("SetState created an unknown service")
	}
	want := State{CanaryWeight: 30, LastAction: at(5), Paused: true}
	c.SetState("search", want)
	if s, _ := c.State("search"); s != want {
		t.Fatalf("State after SetState = %+v, want %+v", s, want)
	}
	if s, _ := c.State(a.Service); s.CanaryWeight != 10 {
		t.Fatal("SetState of one group changed another")
	}
}

func TestControllerEvaluate(t *testing.T) {
	a, b, d := testGroup(), testGroup(), testGroup()
	b.Service, b.Configured = "search", 40
	d.Service = "idle"
	groups := []Group{a, b, d}
	c := NewController(groups)
	groups[0].Service = "mutated" // the controller keeps its own copy

	if got := c.Evaluate(at(0), nil); got != nil {
		t.Fatalf("no windows: %+v", got)
	}
	// "idle" has no window: skipped; the others act in group order.
	got := c.Evaluate(at(0), map[string]*Window{"search": terrible, "checkout": healthy, "other": terrible})
	if len(got) != 2 ||
		got[0].Service != "checkout" || got[0].Kind != apiv1.CanaryPromote || got[0].To != 15 ||
		got[1].Service != "search" || got[1].Kind != apiv1.CanarySevereRollback || got[1].To != 0 {
		t.Fatalf("actions %+v, want checkout promote to 15 then search severe to 0", got)
	}
	checkAction(t, a, got[0], healthy)
	checkAction(t, b, got[1], terrible)
	for _, w := range []struct {
		service string
		weight  int
		last    bool
	}{{"checkout", 15, true}, {"search", 0, true}, {"idle", 10, false}} {
		s, _ := c.State(w.service)
		if s.CanaryWeight != w.weight || s.LastAction.Equal(at(0)) != w.last {
			t.Errorf("%s: state %+v, want weight %d acted %v", w.service, s, w.weight, w.last)
		}
	}
	// Inside the cooldown nothing; a nil window skips the group.
	if got := c.Evaluate(at(29), map[string]*Window{"checkout": healthy, "search": healthy, "idle": nil}); got != nil {
		t.Fatalf("inside cooldown: %+v", got)
	}
}

func TestZeroController(t *testing.T) {
	var c Controller
	if got := c.Evaluate(at(0), map[string]*Window{"checkout": healthy}); got != nil {
		t.Fatalf("zero controller acted: %+v", got)
	}
	if _, ok := c.State("checkout"); ok {
		t.Fatal("zero controller has a state")
	}
	c.SetState("checkout", State{}) // must not panic
}
