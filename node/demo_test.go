package node

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
)

// TestResetDemo checks `serve --demo --reset`'s publish: the demo spec as a
// new generation whatever is active, the history kept, nothing stored when
// the demo spec is already active.
func TestResetDemo(t *testing.T) {
	t.Parallel()
	store, url := dbtest.NewStore(t)
	ctx := t.Context()

	g, err := ResetDemo(ctx, url, DemoPorts{})
	if err != nil || g.ID != 1 || g.Unchanged || g.Author != DemoAuthor {
		t.Fatalf("ResetDemo on an empty database = %+v, %v; want generation 1 by %s", g, err, DemoAuthor)
	}
	other := publishTo(t, store, []byte(`{"upstreams":[{"name":"a","endpoints":["127.0.0.1:9301"]}],"services":[{"name":"api","upstream":"a"}]}`))

	g, err = ResetDemo(ctx, url, DemoPorts{})
	if err != nil || g.ID != other.ID+1 || g.Unchanged || g.Action != apiv1.ActionCreate || g.ParentID == nil || *g.ParentID != other.ID {
		t.Fatalf("ResetDemo over generation %d = %+v, %v; want a new generation on top of it", other.ID, g, err)
	}
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range spec.Services {
		names = append(names, s.Name)
	}
	demoStable, demoCanary := DefaultDemoPorts.Addrs()
	if !slices.Equal(names, []string{"web", "shop"}) || !slices.Equal(spec.Upstreams[0].Endpoints, demoStable) ||
		!slices.Equal(spec.Upstreams[1].Endpoints, demoCanary) {
		t.Errorf("the reset generation has services %v and upstreams %+v; want the demo's", names, spec.Upstreams)
	}
	if gens, err := store.List(ctx, 10, 0); err != nil || len(gens) != 3 {
		t.Errorf("history after the reset: %d generations (%v); want all 3 kept", len(gens), err)
	}

	again, err := ResetDemo(ctx, url, DemoPorts{})
	if err != nil || !again.Unchanged || again.ID != g.ID {
		t.Errorf("a second ResetDemo = %+v, %v; want generation %d unchanged", again, err, g.ID)
	}
}

// TestStartDemoSeedsOnce checks that the demo is seeded into an empty
// database only, over the addresses the pools bound.
func TestStartDemoSeedsOnce(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	start := func() []string {
		pools, err := startDemoOn(t.Context(), store, []string{"127.0.0.1:0", "127.0.0.1:0"}, []string{"127.0.0.1:0"}, DefaultDemoPorts)
		for _, p := range pools {
			t.Cleanup(p.Close)
		}
		if err != nil {
			t.Fatal(err)
		}
		return append(slices.Clone(pools[0].Addrs), pools[1].Addrs...)
	}
	addrs := start()
	g, err := store.Current(t.Context())
	if err != nil || g.ID != 1 || g.Author != DemoAuthor {
		t.Fatalf("after the first start: %+v, %v; want the demo seeded as generation 1", g, err)
	}
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	if got := append(slices.Clone(spec.Upstreams[0].Endpoints), spec.Upstreams[1].Endpoints...); !slices.Equal(got, addrs) {
		t.Errorf("seeded endpoints %v, want the bound %v", got, addrs)
	}
	start()
	if g, err := store.Current(t.Context()); err != nil || g.ID != 1 {
		t.Errorf("after a second start: generation %d, %v; want 1 (a database with a generation is not seeded)", g.ID, err)
	}
}

// TestDemoAddresses checks where the demo pools bind for a proxy address,
// and how a bound address is named in the spec.
func TestDemoAddresses(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"127.0.0.1:8080": "127.0.0.1",
		"localhost:8080": "127.0.0.1",
		"10.1.2.3:8080":  "127.0.0.1",
		"0.0.0.0:8080":   "0.0.0.0",
		"[::]:8080":      "::",
		":8080":          "",
		"bogus":          "127.0.0.1",
	} {
		if got := demoBindHost(listen); got != want {
			t.Errorf("demoBindHost(%q) = %q, want %q", listen, got, want)
		}
	}
	demoStable, _ := DefaultDemoPorts.Addrs()
	if got := onHost(demoStable, "0.0.0.0"); !slices.Equal(got, []string{"0.0.0.0:9001", "0.0.0.0:9002"}) {
		t.Errorf("onHost = %v", got)
	}
	if got := reachable([]string{"0.0.0.0:9001", "[::]:9002", ":9003", "127.0.0.1:9101"}); !slices.Equal(got,
		[]string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003", "127.0.0.1:9101"}) {
		t.Errorf("reachable = %v", got)
	}
}
