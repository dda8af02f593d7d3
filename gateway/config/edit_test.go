package config

import (
	"errors"
	"reflect"
	"testing"
)

// weightsOf returns the target weights of the named service.
func weightsOf(t *testing.T, s *Spec, service string) []int {
	t.Helper()
	svc, _ := s.Service(service)
	if svc == nil || svc.Split == nil {
		t.Fatalf("service %q has no split", service)
	}
	ws := make([]int, len(svc.Split.Targets))
	for i, tg := range svc.Split.Targets {
		ws[i] = tg.Weight
	}
	return ws
}

// editSpec is validSpec with the api weights set and a third service "trio"
// splitting over three upstreams 50/30/20.
func editSpec(apiWeights ...int) *Spec {
	s := validSpec()
	for i, w := range apiWeights {
		s.Services[0].Split.Targets[i].Weight = w
	}
	s.Upstreams = append(s.Upstreams, Upstream{Name: "api-next", Endpoints: []string{"127.0.0.1:9201"}})
	s.Services = append(s.Services, Service{
		Name: "trio", BasePath: "/trio",
		Split: &Split{Targets: []Target{{"api-stable", 50}, {"api-canary", 30}, {"api-next", 20}}},
	})
	return s
}

// checkEdit runs an edit on a spec and asserts the resulting weights of
// service (nil when the edit must fail with wantErr or with the problems),
// and that the input spec was not modified.
func checkEdit(t *testing.T, in *Spec, service string, edit func(*Spec) (*Spec, error), want []int, wantErr error, wantProblems ...problem) {
	t.Helper()
	before := in.Clone()
	out, err := edit(in)
	if !reflect.DeepEqual(in, before) {
		t.Errorf("the edit modified its input")
	}
	switch {
	case wantErr != nil:
		if !errors.Is(err, wantErr) {
			t.Fatalf("error = %v, want %v", err, wantErr)
		}
	case len(wantProblems) > 0:
		checkProblems(t, err, wantProblems...)
	case err != nil:
		t.Fatalf("unexpected error: %v", err)
	}
	if err != nil {
		if out != nil {
			t.Errorf("returned a spec with an error")
		}
		return
	}
	if got := weightsOf(t, out, service); !reflect.DeepEqual(got, want) {
		t.Errorf("weights = %v, want %v", got, want)
	}
	if out.Services[0].Split == in.Services[0].Split {
		t.Errorf("the result shares memory with the input")
	}
}

func TestFlip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    *Spec
		service string
		want    []int
		wantErr error
	}{
		{"blue-green", editSpec(100, 0), "api", []int{0, 100}, nil},
		{"canary", editSpec(90, 10), "api", []int{10, 90}, nil},
		{"back again", editSpec(0, 100), "api", []int{100, 0}, nil},
		{"equal weights", editSpec(50, 50), "api", []int{50, 50}, nil},
		{"unknown service", editSpec(), "nope", nil, ErrServiceNotFound},
		{"single upstream", editSpec(), "web", nil, ErrNotTwoTargetSplit},
		{"three targets", editSpec(), "trio", nil, ErrNotTwoTargetSplit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkEdit(t, tt.spec, tt.service, func(s *Spec) (*Spec, error) { return Flip(s, tt.service) }, tt.want, tt.wantErr)
		})
	}
}

func TestSetWeights(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		service   string
		weights   map[string]int
		reshuffle bool
		want      []int
		wantErr   error
		problems  []problem
	}{
		{name: "same total", service: "api", weights: map[string]int{"api-stable": 90, "api-canary": 10}, want: []int{90, 10}},
		{name: "full cut-over", service: "api", weights: map[string]int{"api-stable": 0, "api-canary": 100}, want: []int{0, 100}},
		{name: "unnamed targets keep their weight", service: "trio",
			weights: map[string]int{"api-canary": 20, "api-next": 30}, want: []int{50, 20, 30}},
		{name: "total change refused", service: "api", weights: map[string]int{"api-canary": 15},
			problems: []problem{{"weights", "total weight would change from 100 to 110", ""}}},
		{name: "total change allowed", service: "api", weights: map[string]int{"api-canary": 15}, reshuffle: true,
			want: []int{95, 15}},
		{name: "not a target", service: "api", weights: map[string]int{"api-next": 5, "api-canry": 5},
			problems: []problem{
				{"weights", `"api-canry" is not a target of service "api"; its targets are "api-stable", "api-canary"`, ""},
				{"weights", `"api-next" is not a target`, ""},
			}},
		{name: "negative weight", service: "api", weights: map[string]int{"api-canary": -5, "api-stable": 105},
			problems: []problem{{"weights", `weight of "api-canary" must be 0..1000000, got -5`, ""}}},
		{name: "no weights", service: "api", weights: map[string]int{},
			problems: []problem{{"weights", "must name at least one target", ""}}},
		{name: "result must validate", service: "api", weights: map[string]int{"api-stable": 0, "api-canary": 0}, reshuffle: true,
			problems: []problem{
				{"services[0].split.targets", "total weight must be 1..1000000, got 0", ""},
			}},
		{name: "step above the new total", service: "api", weights: map[string]int{"api-stable": 2, "api-canary": 1}, reshuffle: true,
			problems: []problem{{"services[0].split.canary_analysis.step", "must be 1..3 (the total weight), got 5", ""}}},
		{name: "unknown service", service: "nope", weights: map[string]int{"a": 1}, wantErr: ErrServiceNotFound},
		{name: "single upstream", service: "web", weights: map[string]int{"api-stable": 1}, wantErr: ErrNoSplit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkEdit(t, editSpec(95, 5), tt.service, func(s *Spec) (*Spec, error) {
				return SetWeights(s, tt.service, tt.weights, tt.reshuffle)
			}, tt.want, tt.wantErr, tt.problems...)
		})
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		spec    *Spec
		service string
		want    []int
		wantErr error
	}{
		{"canary", editSpec(90, 10), "api", []int{100, 0}, nil},
		{"after a flip", editSpec(0, 100), "api", []int{100, 0}, nil},
		{"already killed", editSpec(100, 0), "api", []int{100, 0}, nil},
		{"three targets", editSpec(), "trio", []int{100, 0, 0}, nil},
		{"unknown service", editSpec(), "nope", nil, ErrServiceNotFound},
		{"single upstream", editSpec(), "web", nil, ErrNoSplit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkEdit(t, tt.spec, tt.service, func(s *Spec) (*Spec, error) { return Kill(s, tt.service) }, tt.want, tt.wantErr)
		})
	}
}

func TestEditRefusesInvalidInput(t *testing.T) {
	t.Parallel()
	s := editSpec(95, 5)
	s.Upstreams[0].Endpoints = nil
	for name, edit := range map[string]func(*Spec) (*Spec, error){
		"flip": func(s *Spec) (*Spec, error) { return Flip(s, "api") },
		"kill": func(s *Spec) (*Spec, error) { return Kill(s, "api") },
		"weights": func(s *Spec) (*Spec, error) {
			return SetWeights(s, "api", map[string]int{"api-stable": 90, "api-canary": 10}, false)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkEdit(t, s, "api", edit, nil, nil, problem{"upstreams[0].endpoints", "must list 1..64 endpoints", ""})
		})
	}
}

func TestEditErrorsNameTheService(t *testing.T) {
	t.Parallel()
	_, err := Flip(editSpec(), "nope")
	if err == nil || err.Error() != `flip service "nope": service not found` {
		t.Errorf("error = %v", err)
	}
}
