package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// problem is an expected FieldError: the exact path and a fragment of the
// message. not, when set, must not appear in the message.
type problem struct {
	path string
	msg  string
	not  string
}

// checkProblems asserts that err lists exactly the want problems, in order;
// an empty want means err must be nil.
func checkProblems(t *testing.T, err error, want ...problem) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v (%T), want *ValidationError", err, err)
	}
	if len(ve.Errors) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(ve.Errors), len(want), listProblems(ve.Errors))
	}
	for i, w := range want {
		got := ve.Errors[i]
		if got.Path != w.path || !strings.Contains(got.Message, w.msg) || (w.not != "" && strings.Contains(got.Message, w.not)) {
			t.Errorf("problem %d = %q: %q\nwant path %q, message containing %q (and not %q)\nall:\n%s",
				i, got.Path, got.Message, w.path, w.msg, w.not, listProblems(ve.Errors))
		}
	}
}

func listProblems(fes []FieldError) string {
	var b strings.Builder
	for _, fe := range fes {
		b.WriteString("  " + fe.Path + ": " + fe.Message + "\n")
	}
	return b.String()
}

// validSpec returns a valid spec built in Go, already defaulted: a canary
// split with sticky sessions on "api", and a single-upstream "web" service on
// its own host.
func validSpec() *Spec {
	return &Spec{
		Upstreams: []Upstream{
			{
				Name:      "api-stable",
				Balancer:  BalancerRoundRobin,
				Endpoints: []string{"127.0.0.1:9001", "127.0.0.1:9002"},
				HealthCheck: &HealthCheck{
					Path: "/healthz", IntervalS: 5, TimeoutS: 2, HealthyThreshold: 2, UnhealthyThreshold: 2, ExpectedStatus: StatusRange{200, 399},
				},
				ConnectTimeoutMS: DefaultConnectTimeoutMS, ResponseHeaderTimeoutMS: DefaultResponseHeaderTimeoutMS, IdleTimeoutMS: DefaultIdleTimeoutMS,
			},
			{Name: "api-canary", Balancer: BalancerRoundRobin, Endpoints: []string{"127.0.0.1:9101"},
				ConnectTimeoutMS: DefaultConnectTimeoutMS, ResponseHeaderTimeoutMS: DefaultResponseHeaderTimeoutMS, IdleTimeoutMS: DefaultIdleTimeoutMS},
		},
		Services: []Service{
			{
				Name:     "api",
				BasePath: "/v1",
				Split: &Split{
					Targets: []Target{{Upstream: "api-stable", Weight: 95}, {Upstream: "api-canary", Weight: 5}},
					CanaryAnalysis: &CanaryAnalysis{
						Enabled: true, WindowSeconds: 60, Step: 5, MinRequests: 10, CooldownSeconds: 30,
						Promote:  Threshold{Metric: MetricErrorRate, Threshold: 0.01},
						Rollback: Threshold{Metric: MetricErrorRate, Threshold: 0.05},
					},
				},
				Sticky: &Sticky{Cookie: "dwara_affinity", TTLSeconds: 3600},
			},
			{Name: "web", BasePath: "/", Host: "example.com", Upstream: "api-stable"},
		},
	}
}

// exampleSpec is the README's spec example as Parse must return it.
func exampleSpec() *Spec {
	s := validSpec()
	s.Services = s.Services[:1]
	return s
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
