package config

import (
	"math"
	"reflect"
	"testing"
)

func TestDiffServices(t *testing.T) {
	t.Parallel()
	api := func(s *Spec) *Service { svc, _ := s.Service("api"); return svc }
	tests := []struct {
		name      string
		mutateOld func(*Spec) // nil: the old spec is validSpec()
		mutate    func(*Spec)
		want      ServiceDiff // of service "api"
	}{
		{name: "unchanged", mutate: func(*Spec) {},
			want: ServiceDiff{Name: "api", Change: ChangeUnchanged, Details: []string{}, MovedShare: 0}},
		{name: "weights 95/5 to 90/10",
			mutate: func(s *Spec) { api(s).Split.Targets[0].Weight, api(s).Split.Targets[1].Weight = 90, 10 },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0.05,
				Details: []string{"weights api-stable 95->90", "weights api-canary 5->10"}}},
		{name: "flip",
			mutate: func(s *Spec) { api(s).Split.Targets[0].Weight, api(s).Split.Targets[1].Weight = 5, 95 },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0.9,
				Details: []string{"weights api-stable 95->5", "weights api-canary 5->95"}}},
		{name: "reorder",
			mutate: func(s *Spec) {
				ts := api(s).Split.Targets
				ts[0], ts[1] = ts[1], ts[0]
			},
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0.1,
				Details: []string{"targets reordered api-stable,api-canary -> api-canary,api-stable"}}},
		{name: "total change",
			mutate: func(s *Spec) { api(s).Split.Targets[1].Weight = 10 },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: Displacement(
				[]Target{{Upstream: "api-stable", Weight: 95}, {Upstream: "api-canary", Weight: 5}},
				[]Target{{Upstream: "api-stable", Weight: 95}, {Upstream: "api-canary", Weight: 10}}),
				Details: []string{"weights api-canary 5->10", "total weight 100->105 (keys reshuffled)"}}},
		{name: "target replaced",
			mutate: func(s *Spec) {
				s.Upstreams = append(s.Upstreams, Upstream{Name: "api-next", Balancer: BalancerRoundRobin, Endpoints: []string{"127.0.0.1:9201"}})
				api(s).Split.Targets[1] = Target{Upstream: "api-next", Weight: 5}
			},
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0.05,
				Details: []string{"target removed api-canary (weight 5)", "target added api-next (weight 5)"}}},
		{name: "split to one upstream",
			mutate: func(s *Spec) { api(s).Split, api(s).Upstream = nil, "api-stable" },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0.05,
				Details: []string{"routing split api-stable 95 / api-canary 5 -> upstream api-stable"}}},
		{name: "sticky removed",
			mutate: func(s *Spec) { api(s).Sticky = nil },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0,
				Details: []string{"sticky removed (cookie dwara_affinity)"}}},
		{name: "sticky cookie and ttl changed",
			mutate: func(s *Spec) { api(s).Sticky = &Sticky{Cookie: "sid", TTLSeconds: 60} },
			want: ServiceDiff{Name: "api", Change: ChangeModified, MovedShare: 0,
				Details: []string{"sticky cookie dwara_affinity->sid (sessions re-pinned)", "sticky ttl_s 3600->60"}}},
		{name: "canary_analysis added",
			mutateOld: func(s *Spec) { api(s).Split.CanaryAnalysis = nil },
			mutate:    func(*Spec) {},
			want:      ServiceDiff{Name: "api", Change: ChangeModified, Details: []string{"canary_analysis added (enabled true)"}}},
		{name: "sticky added",
			mutateOld: func(s *Spec) { api(s).Sticky = nil },
			mutate:    func(*Spec) {},
			want:      ServiceDiff{Name: "api", Change: ChangeModified, Details: []string{"sticky added (cookie dwara_affinity, ttl_s 3600)"}}},
		{name: "canary_analysis removed",
			mutate: func(s *Spec) { api(s).Split.CanaryAnalysis = nil },
			want:   ServiceDiff{Name: "api", Change: ChangeModified, Details: []string{"canary_analysis removed"}}},
		{name: "canary_analysis disabled",
			mutate: func(s *Spec) { api(s).Split.CanaryAnalysis.Enabled = false },
			want:   ServiceDiff{Name: "api", Change: ChangeModified, Details: []string{"canary_analysis enabled true->false"}}},
		{name: "canary_analysis settings",
			mutate: func(s *Spec) { api(s).Split.CanaryAnalysis.Step = 10 },
			want:   ServiceDiff{Name: "api", Change: ChangeModified, Details: []string{"canary_analysis settings changed"}}},
		{name: "base path and host",
			mutate: func(s *Spec) { api(s).BasePath, api(s).Host = "/v2", "api.example.com" },
			want: ServiceDiff{Name: "api", Change: ChangeModified,
				Details: []string{"base_path /v1->/v2", `host ""->"api.example.com"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, new := validSpec(), validSpec()
			if tt.mutateOld != nil {
				tt.mutateOld(old)
			}
			tt.mutate(new)
			d := Diff(old, new)
			got := d.Services[0]
			if got.Name != tt.want.Name || got.Change != tt.want.Change || !reflect.DeepEqual(got.Details, tt.want.Details) ||
				math.Abs(got.MovedShare-tt.want.MovedShare) > 1e-9 {
				t.Errorf("Diff service api =\n  %+v\nwant\n  %+v", got, tt.want)
			}
			if web := d.Services[1]; web.Change != ChangeUnchanged || web.MovedShare != 0 {
				t.Errorf("Diff service web = %+v, want unchanged", web)
			}
		})
	}
}

func TestDiffServiceOneUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Service)
		want   ServiceDiff
	}{
		{name: "upstream changed", mutate: func(s *Service) { s.Upstream = "api-canary" },
			want: ServiceDiff{Name: "web", Change: ChangeModified, Details: []string{"upstream api-stable->api-canary"}, MovedShare: 1}},
		{name: "sticky added", mutate: func(s *Service) { s.Sticky = &Sticky{Cookie: "sid", TTLSeconds: 3600} },
			want: ServiceDiff{Name: "web", Change: ChangeModified, Details: []string{"sticky added (cookie sid, ttl_s 3600)"}, MovedShare: 0}},
		{name: "to a split",
			mutate: func(s *Service) {
				s.Upstream = ""
				s.Split = &Split{Targets: []Target{{Upstream: "api-stable", Weight: 1}, {Upstream: "api-canary", Weight: 1}}}
			},
			want: ServiceDiff{Name: "web", Change: ChangeModified, Details: []string{"routing upstream api-stable -> split api-stable 1 / api-canary 1"}, MovedShare: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, new := validSpec(), validSpec()
			web, _ := new.Service("web")
			tt.mutate(web)
			got := Diff(old, new).Services[1]
			if got.Name != tt.want.Name || got.Change != tt.want.Change || !reflect.DeepEqual(got.Details, tt.want.Details) ||
				math.Abs(got.MovedShare-tt.want.MovedShare) > 1e-9 {
				t.Errorf("Diff service web =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestDiffAddedRemoved(t *testing.T) {
	t.Parallel()
	old, new := validSpec(), validSpec()
	// new: "web" removed, "admin" added, upstream "api-canary" removed and
	// "admin-pool" added.
	new.Services = []Service{new.Services[0], {Name: "admin", BasePath: "/admin", Upstream: "admin-pool"}}
	new.Services[0].Split = nil
	new.Services[0].Upstream = "api-stable"
	new.Upstreams = []Upstream{new.Upstreams[0], {Name: "admin-pool", Endpoints: []string{"10.0.0.1:80", "10.0.0.2:80"}}}
	want := SpecDiff{
		Services: []ServiceDiff{
			{Name: "api", Change: ChangeModified, Details: []string{"routing split api-stable 95 / api-canary 5 -> upstream api-stable"}, MovedShare: 0.05},
			{Name: "admin", Change: ChangeAdded, Details: []string{"upstream admin-pool"}, MovedShare: 1},
			{Name: "web", Change: ChangeRemoved, Details: []string{"was upstream api-stable"}, MovedShare: 1},
		},
		Upstreams: []UpstreamDiff{
			{Name: "api-stable", Change: ChangeUnchanged, Details: []string{}},
			{Name: "admin-pool", Change: ChangeAdded, Details: []string{"endpoints 10.0.0.1:80, 10.0.0.2:80"}},
			{Name: "api-canary", Change: ChangeRemoved, Details: []string{}},
		},
		CanaryReset: []string{},
	}
	if got := Diff(old, new); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff =\n  %+v\nwant\n  %+v", got, want)
	}

	// From the empty spec every service is added with its routing.
	got := Diff(&Spec{}, validSpec())
	wantAdded := []ServiceDiff{
		{Name: "api", Change: ChangeAdded, Details: []string{"split api-stable 95 / api-canary 5"}, MovedShare: 1},
		{Name: "web", Change: ChangeAdded, Details: []string{"upstream api-stable"}, MovedShare: 1},
	}
	if !reflect.DeepEqual(got.Services, wantAdded) {
		t.Errorf("Diff from empty: services %+v, want %+v", got.Services, wantAdded)
	}
}

func TestDiffUpstreams(t *testing.T) {
	t.Parallel()
	stable := func(s *Spec) *Upstream { u, _ := s.Upstream("api-stable"); return u }
	tests := []struct {
		name   string
		mutate func(*Spec)
		want   []string // details of api-stable; nil means unchanged
	}{
		{name: "unchanged", mutate: func(*Spec) {}},
		{name: "endpoint added and removed",
			mutate: func(s *Spec) { stable(s).Endpoints = []string{"127.0.0.1:9002", "127.0.0.1:9003"} },
			want:   []string{"endpoint added 127.0.0.1:9003", "endpoint removed 127.0.0.1:9001"}},
		{name: "endpoints reordered is no change",
			mutate: func(s *Spec) { stable(s).Endpoints = []string{"127.0.0.1:9002", "127.0.0.1:9001"} }},
		{name: "balancer", mutate: func(s *Spec) { stable(s).Balancer = BalancerIPHash },
			want: []string{"balancer round_robin->ip_hash"}},
		{name: "health_check removed", mutate: func(s *Spec) { stable(s).HealthCheck = nil },
			want: []string{"health_check removed"}},
		{name: "health_check changed", mutate: func(s *Spec) { stable(s).HealthCheck.IntervalS = 10 },
			want: []string{"health_check changed"}},
		{name: "timeouts", mutate: func(s *Spec) {
			stable(s).ConnectTimeoutMS = 250
			stable(s).ResponseHeaderTimeoutMS = 1500
		}, want: []string{"connect_timeout_ms 5000->250", "response_header_timeout_ms 60000->1500"}},
		{name: "passive", mutate: func(s *Spec) { stable(s).Passive = &Passive{ConsecutiveFailures: 5, Consecutive5xx: 2} },
			want: []string{"passive changed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, new := validSpec(), validSpec()
			tt.mutate(new)
			got := Diff(old, new).Upstreams[0]
			want := UpstreamDiff{Name: "api-stable", Change: ChangeUnchanged, Details: []string{}}
			if tt.want != nil {
				want.Change, want.Details = ChangeModified, tt.want
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Diff upstream = %+v, want %+v", got, want)
			}
		})
	}
	t.Run("health_check added", func(t *testing.T) { // api-canary has none in validSpec
		t.Parallel()
		old, new := validSpec(), validSpec()
		canary, _ := new.Upstream("api-canary")
		canary.HealthCheck = &HealthCheck{Path: "/ready", IntervalS: 5, TimeoutS: 2, HealthyThreshold: 2, UnhealthyThreshold: 2}
		got := Diff(old, new).Upstreams[1]
		want := UpstreamDiff{Name: "api-canary", Change: ChangeModified, Details: []string{"health_check added (path /ready)"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Diff upstream = %+v, want %+v", got, want)
		}
	})
}

func TestDiffNeverNil(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		old, new *Spec
	}{
		{"both empty", &Spec{}, &Spec{}},
		{"both nil", nil, nil},
		{"identical", validSpec(), validSpec()},
		{"everything removed", validSpec(), &Spec{}},
	} {
		d := Diff(tt.old, tt.new)
		if d.Services == nil || d.Upstreams == nil {
			t.Errorf("%s: nil slice in %+v", tt.name, d)
		}
		for _, s := range d.Services {
			if s.Details == nil {
				t.Errorf("%s: service %s has nil details", tt.name, s.Name)
			}
		}
		for _, u := range d.Upstreams {
			if u.Details == nil {
				t.Errorf("%s: upstream %s has nil details", tt.name, u.Name)
			}
		}
	}
}

func TestDiffDoesNotModify(t *testing.T) {
	t.Parallel()
	old, new := validSpec(), validSpec()
	new.Services[0].Split.Targets[0].Weight = 90
	new.Services[0].Split.Targets[1].Weight = 10
	oldCopy, newCopy := old.Clone(), new.Clone()
	Diff(old, new)
	if !reflect.DeepEqual(old, oldCopy) || !reflect.DeepEqual(new, newCopy) {
		t.Error("Diff modified its input")
	}
}
