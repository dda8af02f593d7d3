package config

import (
	"reflect"
	"testing"
)

func TestDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   *Spec
		want *Spec
	}{
		{"nil", nil, nil},
		{"empty", &Spec{}, &Spec{}},
		{
			name: "zeros filled",
			in: &Spec{
				Upstreams: []Upstream{{Name: "a", HealthCheck: &HealthCheck{}, Passive: &Passive{}}},
				Services: []Service{{
					Name:   "s",
					Split:  &Split{CanaryAnalysis: &CanaryAnalysis{}},
					Sticky: &Sticky{Cookie: "c"},
				}},
			},
			want: &Spec{
				Upstreams: []Upstream{{Name: "a", Balancer: "round_robin",
					HealthCheck:      &HealthCheck{Path: "/healthz", IntervalS: 5, TimeoutS: 2, HealthyThreshold: 2, UnhealthyThreshold: 2, ExpectedStatus: StatusRange{200, 399}},
					Passive:          &Passive{ConsecutiveFailures: DefaultPassiveConsecutiveFailures},
					ConnectTimeoutMS: DefaultConnectTimeoutMS, ResponseHeaderTimeoutMS: DefaultResponseHeaderTimeoutMS, IdleTimeoutMS: DefaultIdleTimeoutMS}},
				Services: []Service{{
					Name: "s", BasePath: "/",
					Split:  &Split{CanaryAnalysis: &CanaryAnalysis{WindowSeconds: 60, Step: 5, MinRequests: 10, CooldownSeconds: 30}},
					Sticky: &Sticky{Cookie: "c", TTLSeconds: 3600},
				}},
			},
		},
		{
			name: "set values and thresholds kept",
			in: &Spec{
				Upstreams: []Upstream{{Name: "a", Balancer: "ip_hash",
					HealthCheck:      &HealthCheck{Path: "/up", IntervalS: 9, TimeoutS: 8, HealthyThreshold: 7, UnhealthyThreshold: 6, ExpectedStatus: StatusRange{201, 302}},
					Passive:          &Passive{ConsecutiveFailures: 4, Consecutive5xx: 5},
					ConnectTimeoutMS: 1, ResponseHeaderTimeoutMS: 2, IdleTimeoutMS: 3}},
				Services: []Service{{
					Name: "s", BasePath: "/x",
					Split: &Split{
						Targets: []Target{{"a", 0}},
						CanaryAnalysis: &CanaryAnalysis{WindowSeconds: 1, Step: 2, MinRequests: 3, CooldownSeconds: 4,
							Promote: Threshold{Metric: "error_rate"}},
					},
					Sticky: &Sticky{Cookie: "c", TTLSeconds: 5},
				}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want := tt.want
			if want == nil {
				want = tt.in.Clone() // nothing to fill in
			}
			got := tt.in.Clone()
			got.Defaults()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Defaults:\n got %+v\nwant %+v", got, want)
			}
			got.Defaults()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Defaults is not idempotent")
			}
		})
	}
}

func TestClone(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Upstreams[1].Endpoints = []string{} // empty, not nil, must stay so
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatalf("clone differs:\n got %+v\nwant %+v", c, s)
	}
	// Change every reference-typed part of the clone; the original must not
	// see any of it.
	c.Upstreams[0].Name = "x"
	c.Upstreams[0].Endpoints[0] = "x:1"
	c.Upstreams[0].HealthCheck.Path = "/x"
	c.Services[0].Split.Targets[0].Weight = 1
	c.Services[0].Split.CanaryAnalysis.Step = 1
	c.Services[0].Sticky.Cookie = "x"
	c.Services[1].Name = "x"
	if !reflect.DeepEqual(s, validSpecWithEmptyEndpoints()) {
		t.Errorf("changing the clone changed the original: %+v", s)
	}
	if c.Upstreams[1].Endpoints == nil {
		t.Errorf("an empty slice became nil")
	}
	var nilSpec *Spec
	if nilSpec.Clone() != nil {
		t.Errorf("Clone of nil is not nil")
	}
}

func validSpecWithEmptyEndpoints() *Spec {
	s := validSpec()
	s.Upstreams[1].Endpoints = []string{}
	return s
}

func TestLookup(t *testing.T) {
	t.Parallel()
	s := validSpec()
	tests := []struct {
		name      string
		spec      *Spec
		service   string
		upstream  string
		wantSvc   int
		wantUpstr int
	}{
		{"first", s, "api", "api-stable", 0, 0},
		{"second", s, "web", "api-canary", 1, 1},
		{"absent", s, "nope", "nope", -1, -1},
		{"nil spec", nil, "api", "api-stable", -1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			svc, i := tt.spec.Service(tt.service)
			if i != tt.wantSvc || (i < 0) != (svc == nil) || (svc != nil && svc != &tt.spec.Services[i]) {
				t.Errorf("Service(%q) = %p, %d; want index %d", tt.service, svc, i, tt.wantSvc)
			}
			u, j := tt.spec.Upstream(tt.upstream)
			if j != tt.wantUpstr || (j < 0) != (u == nil) || (u != nil && u != &tt.spec.Upstreams[j]) {
				t.Errorf("Upstream(%q) = %p, %d; want index %d", tt.upstream, u, j, tt.wantUpstr)
			}
		})
	}
}

func TestClonePassive(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Upstreams[0].Passive = &Passive{ConsecutiveFailures: 2, Consecutive5xx: 3}
	c := s.Clone()
	if !reflect.DeepEqual(s, c) {
		t.Fatalf("clone differs:\n got %+v\nwant %+v", c, s)
	}
	c.Upstreams[0].Passive.Consecutive5xx = 9
	if s.Upstreams[0].Passive.Consecutive5xx != 3 {
		t.Error("changing the clone's passive block changed the original")
	}
}
