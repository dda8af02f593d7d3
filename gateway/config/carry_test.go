package config_test

import (
	"slices"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// TestCanaryReset lists a canary group as reset exactly when its targets,
// weights, canary_analysis or target upstreams change, and never a change
// elsewhere, a group new to the spec, or a default spelled out.
func TestCanaryReset(t *testing.T) {
	t.Parallel()
	ca := config.CanaryAnalysis{Enabled: true, Promote: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05}}
	base := func() *spectest.Builder {
		return spectest.Canary(90, 10).Analysis(ca).Upstream("other", "127.0.0.1:7000").Route("web", "/", "other")
	}
	tests := []struct {
		name string
		edit func(*config.Spec)
		want []string
	}{
		{"unchanged", func(*config.Spec) {}, []string{}},
		{"another service changed", func(s *config.Spec) { s.Services[1].BasePath = "/web" }, []string{}},
		{"another upstream changed", func(s *config.Spec) { s.Upstreams[2].Endpoints = []string{"127.0.0.1:7001"} }, []string{}},
		{"a default spelled out", func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis.WindowSeconds = config.DefaultCanaryWindowS }, []string{}},
		{"gate auto spelled out", func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis.Gate = config.GateAuto }, []string{}},
		{"gate final", func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis.Gate = config.GateFinal }, []string{"api"}},
		{"weights", func(s *config.Spec) { s.Services[0].Split.Targets[1].Weight = 20 }, []string{"api"}},
		{"analysis", func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis.MinRequests = 99 }, []string{"api"}},
		{"canary endpoints", func(s *config.Spec) { s.Upstreams[1].Endpoints = []string{"127.0.0.1:9999"} }, []string{"api"}},
		{"analysis removed", func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis = nil }, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old := base().Spec()
			next := base().Edit(tc.edit).Spec()
			if got := config.CanaryReset(old, next); !slices.Equal(got, tc.want) || got == nil {
				t.Errorf("CanaryReset = %#v, want %#v", got, tc.want)
			}
			if got := config.Diff(old, next).CanaryReset; !slices.Equal(got, tc.want) {
				t.Errorf("Diff.CanaryReset = %#v, want %#v", got, tc.want)
			}
		})
	}
	if got := config.CanaryReset(nil, base().Spec()); len(got) != 0 {
		t.Errorf("a first generation resets %v, want nothing", got)
	}
}
