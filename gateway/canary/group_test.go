package canary

import (
	"reflect"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

func TestGroups(t *testing.T) {
	ca := func(step int) *config.CanaryAnalysis {
		return &config.CanaryAnalysis{Enabled: true, Step: step, WindowSeconds: 60}
	}
	spec := &config.Spec{Services: []config.Service{
		{Name: "plain", Upstream: "a"},
		{Name: "first", Split: &config.Split{
			Targets:        []config.Target{{Upstream: "v1", Weight: 90}, {Upstream: "v2", Weight: 10}},
			CanaryAnalysis: ca(5),
		}},
		{Name: "no-analysis", Split: &config.Split{
			Targets: []config.Target{{Upstream: "v1", Weight: 50}, {Upstream: "v2", Weight: 50}},
		}},
		{Name: "three-way", Split: &config.Split{
			Targets:        []config.Target{{Upstream: "a", Weight: 1}, {Upstream: "b", Weight: 1}, {Upstream: "c", Weight: 1}},
			CanaryAnalysis: ca(1),
		}},
		{Name: "second", Split: &config.Split{
			Targets:        []config.Target{{Upstream: "old", Weight: 3}, {Upstream: "new", Weight: 0}},
			CanaryAnalysis: ca(1),
		}},
		{Name: "llm", Upstream: "a", Models: []config.ModelAlias{
			{Alias: "plain", Targets: []config.ModelTarget{{Upstream: "a", Model: "m1", Weight: 1}, {Upstream: "b", Model: "m2", Weight: 1}}},
			{Alias: "chat", CanaryAnalysis: ca(2), Targets: []config.ModelTarget{{Upstream: "a", Model: "m1", Weight: 90}, {Upstream: "b", Model: "m2", Weight: 10}}},
		}},
	}}
	got := Groups(spec)
	want := []Group{
		{Service: "first", Kind: "service", Baseline: "v1", Canary: "v2", Total: 100, Configured: 10, Analysis: *ca(5)},
		{Service: "second", Kind: "service", Baseline: "old", Canary: "new", Total: 3, Configured: 0, Analysis: *ca(1)},
		{Service: "llm/chat", Kind: "model", Baseline: "a", Canary: "b", Total: 100, Configured: 10, Analysis: *ca(2)},
	}
	if len(got) != len(want) {
		t.Fatalf("Groups = %+v, want %+v", got, want)
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("group %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// The result does not share the spec's analysis.
	spec.Services[1].Split.CanaryAnalysis.Step = 99
	if got[0].Analysis.Step != 5 {
		t.Error("Groups shares the spec's CanaryAnalysis")
	}

	if g := Groups(nil); g != nil {
		t.Errorf("Groups(nil) = %v, want nil", g)
	}
	if g := Groups(&config.Spec{Services: spec.Services[:1]}); g != nil {
		t.Errorf("Groups of a spec with no canary = %v, want nil", g)
	}
}

func TestGroupWeights(t *testing.T) {
	g := Group{Total: 100}
	for _, c := range []int{0, 1, 50, 99, 100} {
		w := g.Weights(c)
		if w[1] != c || w[0]+w[1] != 100 {
			t.Errorf("Weights(%d) = %v", c, w)
		}
	}
}
