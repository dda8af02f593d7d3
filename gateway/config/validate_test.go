package config

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	// Shorthands for mutating the valid spec.
	up := func(s *Spec) *Upstream { return &s.Upstreams[0] }
	hc := func(s *Spec) *HealthCheck { return s.Upstreams[0].HealthCheck }
	api := func(s *Spec) *Service { return &s.Services[0] }
	web := func(s *Spec) *Service { return &s.Services[1] }
	targets := func(s *Spec) []Target { return s.Services[0].Split.Targets }
	ca := func(s *Spec) *CanaryAnalysis { return s.Services[0].Split.CanaryAnalysis }
	addUpstream := func(name string) func(*Spec) {
		return func(s *Spec) {
			s.Upstreams = append(s.Upstreams, Upstream{Name: name, Endpoints: []string{"10.0.0.1:80"}})
		}
	}
	endpoint := func(ep string) func(*Spec) {
		return func(s *Spec) { up(s).Endpoints = []string{ep} }
	}
	basePath := func(p string) func(*Spec) { return func(s *Spec) { api(s).BasePath = p } }
	host := func(h string) func(*Spec) { return func(s *Spec) { web(s).Host = h } }
	cookie := func(c string) func(*Spec) { return func(s *Spec) { api(s).Sticky.Cookie = c } }
	weights := func(ws ...int) func(*Spec) {
		return func(s *Spec) {
			for i, w := range ws {
				targets(s)[i].Weight = w
			}
		}
	}
	const (
		ep0     = "upstreams[0].endpoints[0]"
		tg      = "services[0].split.targets"
		canary  = "services[0].split.canary_analysis"
		promote = canary + ".promote"
	)

	tests := []struct {
		name   string
		mutate func(*Spec)
		want   []problem
	}{
		{name: "valid", mutate: func(*Spec) {}},

		// names
		{name: "name with dots, underscores and dashes", mutate: addUpstream("a.b_c-9")},
		{name: "name of 63 characters", mutate: addUpstream(strings.Repeat("a", 63))},
		{name: "name of 64 characters", mutate: addUpstream(strings.Repeat("a", 64)),
			want: []problem{{"upstreams[2].name", "invalid upstream name", ""}}},
		{name: "name with uppercase", mutate: addUpstream("Api"),
			want: []problem{{"upstreams[2].name", `invalid upstream name "Api"; must match [a-z0-9][a-z0-9._-]{0,62}`, ""}}},
		{name: "name starting with a dash", mutate: addUpstream("-api"),
			want: []problem{{"upstreams[2].name", "invalid upstream name", ""}}},
		{name: "name starting with a dot", mutate: addUpstream(".api"),
			want: []problem{{"upstreams[2].name", "invalid upstream name", ""}}},
		{name: "empty upstream name", mutate: addUpstream(""),
			want: []problem{{"upstreams[2].name", "is required", ""}}},
		{name: "duplicate upstream name", mutate: addUpstream("api-stable"),
			want: []problem{{"upstreams[2].name", `duplicate upstream name "api-stable" (also upstreams[0])`, ""}}},
		{name: "invalid service name", mutate: func(s *Spec) { web(s).Name = "web site" },
			want: []problem{{"services[1].name", `invalid service name "web site"`, ""}}},
		{name: "duplicate service name", mutate: func(s *Spec) { web(s).Name = "api" },
			want: []problem{{"services[1].name", `duplicate service name "api" (also services[0])`, ""}}},

		// services and upstreams present
		{name: "no services", mutate: func(s *Spec) { s.Services = nil },
			want: []problem{{"services", "at least one service is required", ""}}},
		{name: "no upstreams but services need them", mutate: func(s *Spec) { s.Upstreams = nil },
			want: []problem{
				{tg + "[0].upstream", `unknown upstream "api-stable"; no upstreams are declared`, ""},
				{tg + "[1].upstream", `unknown upstream "api-canary"`, ""},
				{"services[1].upstream", `unknown upstream "api-stable"`, ""},
			}},

		// endpoints
		{name: "no endpoints", mutate: func(s *Spec) { up(s).Endpoints = nil },
			want: []problem{{"upstreams[0].endpoints", "must list 1..64 endpoints, got 0", ""}}},
		{name: "64 endpoints", mutate: func(s *Spec) { up(s).Endpoints = endpoints(64) }},
		{name: "65 endpoints", mutate: func(s *Spec) { up(s).Endpoints = endpoints(65) },
			want: []problem{{"upstreams[0].endpoints", "must list 1..64 endpoints, got 65", ""}}},
		{name: "endpoint host:port name", mutate: endpoint("localhost:8080")},
		{name: "endpoint with underscore", mutate: endpoint("my_svc.internal:80")},
		{name: "endpoint http URL", mutate: endpoint("http://10.0.0.1:8080")},
		{name: "endpoint https URL with slash", mutate: endpoint("https://api.internal:443/")},
		{name: "endpoint IPv6", mutate: endpoint("[::1]:9000")},
		{name: "endpoint IPv6 URL", mutate: endpoint("http://[2001:db8::1]:80")},
		{name: "endpoint unspecified", mutate: endpoint("0.0.0.0:80"),
			want: []problem{{ep0, "0.0.0.0 is the unspecified address", ""}}},
		{name: "endpoint unspecified IPv6", mutate: endpoint("[::]:80"),
			want: []problem{{ep0, ":: is the unspecified address", ""}}},
		{name: "endpoint unspecified mapped", mutate: endpoint("[::ffff:0.0.0.0]:80"),
			want: []problem{{ep0, "0.0.0.0 is the unspecified address", ""}}},
		{name: "endpoint metadata", mutate: endpoint("169.254.169.254:80"),
			want: []problem{{ep0, "169.254.169.254 is a link-local or metadata address; set allow_link_local: true", ""}}},
		{name: "endpoint metadata mapped", mutate: endpoint("http://[::ffff:169.254.169.254]:80"),
			want: []problem{{ep0, "169.254.169.254 is a link-local or metadata address", ""}}},
		{name: "endpoint link-local IPv6", mutate: endpoint("[fe80::1]:80"),
			want: []problem{{ep0, "fe80::1 is a link-local or metadata address", ""}}},
		{name: "endpoint AWS IPv6 metadata", mutate: endpoint("[fd00:ec2::254]:80"),
			want: []problem{{ep0, "fd00:ec2::254 is a link-local or metadata address", ""}}},
		{name: "endpoint link-local allowed", mutate: func(s *Spec) {
			up(s).Endpoints = []string{"169.254.169.254:80", "[fe80::1]:80"}
			up(s).AllowLinkLocal = true
		}},
		{name: "endpoint unspecified even when link-local allowed", mutate: func(s *Spec) {
			up(s).Endpoints = []string{"0.0.0.0:80"}
			up(s).AllowLinkLocal = true
		}, want: []problem{{ep0, "unspecified address", ""}}},
		{name: "endpoint decimal IPv4", mutate: endpoint("2852039166:80"),
			want: []problem{{ep0, "host must be a DNS name or an IP address", ""}}},
		{name: "endpoint hex IPv4", mutate: endpoint("0xa9fea9fe:80"),
			want: []problem{{ep0, "host must be a DNS name or an IP address", ""}}},
		{name: "endpoint octal IPv4", mutate: endpoint("0251.0376.0251.0376:80"),
			want: []problem{{ep0, "host must be a DNS name or an IP address", ""}}},
		{name: "too many services", mutate: func(s *Spec) {
			for i := range MaxServices {
				s.Services = append(s.Services, Service{Name: fmt.Sprintf("s%d", i), Upstream: "api-stable"})
			}
		}, want: []problem{{"services", "at most 10000 services", ""}}},
		{name: "too many upstreams", mutate: func(s *Spec) {
			for i := range MaxUpstreams {
				s.Upstreams = append(s.Upstreams, Upstream{Name: fmt.Sprintf("u%d", i), Endpoints: []string{"10.0.0.1:80"}})
			}
		}, want: []problem{{"upstreams", "at most 20000 upstreams", ""}}},
		{name: "endpoint port 65535", mutate: endpoint("h:65535")},
		{name: "endpoint without port", mutate: endpoint("localhost"),
			want: []problem{{ep0, "must be host:port or http(s)://host:port", ""}}},
		{name: "endpoint port 0", mutate: endpoint("127.0.0.1:0"),
			want: []problem{{ep0, "port must be 1..65535", ""}}},
		{name: "endpoint port 65536", mutate: endpoint("127.0.0.1:65536"),
			want: []problem{{ep0, "port must be 1..65535", ""}}},
		{name: "endpoint port with sign", mutate: endpoint("h:+80"),
			want: []problem{{ep0, "port must be 1..65535", ""}}},
		{name: "endpoint port not a number", mutate: endpoint("h:http"),
			want: []problem{{ep0, "port must be 1..65535", ""}}},
		{name: "endpoint empty host", mutate: endpoint(":80"),
			want: []problem{{ep0, "host is empty", ""}}},
		{name: "endpoint other scheme", mutate: endpoint("ftp://h:21"),
			want: []problem{{ep0, "scheme must be http or https", ""}}},
		{name: "endpoint with path", mutate: endpoint("http://h:80/api"),
			want: []problem{{ep0, `must not have a path other than "/"`, ""}}},
		{name: "endpoint with query", mutate: endpoint("http://h:80/?x=1"),
			want: []problem{{ep0, "must not have a query", ""}}},
		{name: "endpoint with fragment", mutate: endpoint("http://h:80#x"),
			want: []problem{{ep0, "must not have a fragment", ""}}},
		{name: "endpoint with userinfo", mutate: endpoint("http://user:pw@h:80"),
			want: []problem{{ep0, "must not contain userinfo", ""}}},
		{name: "endpoint IPv6 without brackets", mutate: endpoint("::1:80"),
			want: []problem{{ep0, "write IPv6 addresses in brackets", ""}}},
		{name: "endpoint IPv4 in brackets", mutate: endpoint("[10.0.0.1]:80"),
			want: []problem{{ep0, "only an IPv6 address", ""}}},
		{name: "endpoint host with space", mutate: endpoint("a b:80"),
			want: []problem{{ep0, "host must be a DNS name or an IP address", ""}}},
		{name: "duplicate endpoint in another spelling", mutate: func(s *Spec) {
			up(s).Endpoints = []string{"Backend:80", "http://backend:80/"}
		}, want: []problem{{"upstreams[0].endpoints[1]", `duplicate endpoint "http://backend:80/" (also upstreams[0].endpoints[0])`, ""}}},
		{name: "same endpoint with other scheme", mutate: func(s *Spec) {
			up(s).Endpoints = []string{"http://backend:80", "https://backend:80"}
		}},

		// balancer
		{name: "balancer empty means round_robin", mutate: func(s *Spec) { up(s).Balancer = "" }},
		{name: "balancer least_conn", mutate: func(s *Spec) { up(s).Balancer = BalancerLeastConn }},
		{name: "balancer ip_hash", mutate: func(s *Spec) { up(s).Balancer = BalancerIPHash }},
		{name: "balancer peak_ewma", mutate: func(s *Spec) { up(s).Balancer = BalancerPeakEWMA }},
		{name: "balancer unknown", mutate: func(s *Spec) { up(s).Balancer = "random" },
			want: []problem{{"upstreams[0].balancer", `unknown balancer "random"; allowed: round_robin, least_conn, ip_hash, peak_ewma`, ""}}},

		// health checks
		{name: "health check zeros take defaults", mutate: func(s *Spec) { up(s).HealthCheck = &HealthCheck{} }},
		{name: "health path without slash", mutate: func(s *Spec) { hc(s).Path = "healthz" },
			want: []problem{{"upstreams[0].health_check.path", `must start with "/"`, ""}}},
		{name: "health path with query", mutate: func(s *Spec) { hc(s).Path = "/healthz?full=1" }},
		{name: "health path with space", mutate: func(s *Spec) { hc(s).Path = "/health z" },
			want: []problem{{"upstreams[0].health_check.path", "must not contain spaces", ""}}},
		{name: "connect timeout negative", mutate: func(s *Spec) { s.Upstreams[0].ConnectTimeoutMS = -1 },
			want: []problem{{"upstreams[0].connect_timeout_ms", "must be 1..60000, got -1", ""}}},
		{name: "connect timeout 60000", mutate: func(s *Spec) { s.Upstreams[0].ConnectTimeoutMS = 60000 }},
		{name: "connect timeout 60001", mutate: func(s *Spec) { s.Upstreams[1].ConnectTimeoutMS = 60001 },
			want: []problem{{"upstreams[1].connect_timeout_ms", "must be 1..60000, got 60001", ""}}},
		{name: "response header timeout 1", mutate: func(s *Spec) { s.Upstreams[0].ResponseHeaderTimeoutMS = 1 }},
		{name: "response header timeout over an hour", mutate: func(s *Spec) { s.Upstreams[0].ResponseHeaderTimeoutMS = 3_600_001 },
			want: []problem{{"upstreams[0].response_header_timeout_ms", "must be 1..3600000, got 3600001", ""}}},
		{name: "idle timeout negative", mutate: func(s *Spec) { s.Upstreams[0].IdleTimeoutMS = -5 },
			want: []problem{{"upstreams[0].idle_timeout_ms", "must be 1..3600000, got -5", ""}}},
		{name: "expected status 204..204", mutate: func(s *Spec) { hc(s).ExpectedStatus = StatusRange{204, 204} }},
		{name: "expected status inverted", mutate: func(s *Spec) { hc(s).ExpectedStatus = StatusRange{400, 200} },
			want: []problem{{"upstreams[0].health_check.expected_status", "min (400) must not be above max (200)", ""}}},
		{name: "expected status out of range", mutate: func(s *Spec) { hc(s).ExpectedStatus = StatusRange{99, 600} },
			want: []problem{{"upstreams[0].health_check.expected_status.min", "must be 100..599, got 99", ""},
				{"upstreams[0].health_check.expected_status.max", "must be 100..599, got 600", ""}}},
		{name: "health interval negative", mutate: func(s *Spec) { hc(s).IntervalS = -1 },
			want: []problem{{"upstreams[0].health_check.interval_s", "must be 1..3600, got -1", ""}}},
		{name: "health interval 3600", mutate: func(s *Spec) { hc(s).IntervalS = 3600 }},
		{name: "health interval 3601", mutate: func(s *Spec) { hc(s).IntervalS = 3601 },
			want: []problem{{"upstreams[0].health_check.interval_s", "must be 1..3600, got 3601", ""}}},
		{name: "health timeout equal to interval", mutate: func(s *Spec) { hc(s).TimeoutS = 5 }},
		{name: "health timeout above interval", mutate: func(s *Spec) { hc(s).TimeoutS = 6 },
			want: []problem{{"upstreams[0].health_check.timeout_s", "must be 1..interval_s (5), got 6", ""}}},
		{name: "health timeout negative", mutate: func(s *Spec) { hc(s).TimeoutS = -2 },
			want: []problem{{"upstreams[0].health_check.timeout_s", "must be 1..interval_s (5), got -2", ""}}},
		{name: "healthy threshold 100", mutate: func(s *Spec) { hc(s).HealthyThreshold = 100 }},
		{name: "healthy threshold 101", mutate: func(s *Spec) { hc(s).HealthyThreshold = 101 },
			want: []problem{{"upstreams[0].health_check.healthy_threshold", "must be 1..100, got 101", ""}}},
		{name: "unhealthy threshold negative", mutate: func(s *Spec) { hc(s).UnhealthyThreshold = -1 },
			want: []problem{{"upstreams[0].health_check.unhealthy_threshold", "must be 1..100, got -1", ""}}},

		// passive checks
		{name: "passive zeros take defaults", mutate: func(s *Spec) { up(s).Passive = &Passive{} }},
		{name: "passive limits", mutate: func(s *Spec) { up(s).Passive = &Passive{ConsecutiveFailures: 100, Consecutive5xx: 100} }},
		{name: "passive failures 101", mutate: func(s *Spec) { up(s).Passive = &Passive{ConsecutiveFailures: 101} },
			want: []problem{{"upstreams[0].passive.consecutive_failures", "must be 1..100, got 101", ""}}},
		{name: "passive failures negative", mutate: func(s *Spec) { up(s).Passive = &Passive{ConsecutiveFailures: -1} },
			want: []problem{{"upstreams[0].passive.consecutive_failures", "must be 1..100, got -1", ""}}},
		{name: "passive 5xx 101 and negative", mutate: func(s *Spec) {
			up(s).Passive = &Passive{Consecutive5xx: 101}
			s.Upstreams[1].Passive = &Passive{Consecutive5xx: -1}
		}, want: []problem{
			{"upstreams[0].passive.consecutive_5xx", "must be 0..100, got 101", ""},
			{"upstreams[1].passive.consecutive_5xx", "must be 0..100, got -1", ""},
		}},

		// upstream or split
		{name: "both upstream and split", mutate: func(s *Spec) { api(s).Upstream = "api-stable" },
			want: []problem{{"services[0]", "set exactly one of upstream or split, not both", ""}}},
		{name: "neither upstream nor split", mutate: func(s *Spec) { web(s).Upstream = "" },
			want: []problem{{"services[1]", "one of upstream or split is required", ""}}},
		{name: "unknown upstream with suggestion", mutate: func(s *Spec) { web(s).Upstream = "api-canry" },
			want: []problem{{"services[1].upstream", `unknown upstream "api-canry"; did you mean "api-canary"?`, ""}}},
		{name: "unknown upstream two edits away", mutate: func(s *Spec) { web(s).Upstream = "api-stabel" },
			want: []problem{{"services[1].upstream", `did you mean "api-stable"?`, ""}}},
		{name: "unknown upstream far from any", mutate: func(s *Spec) { web(s).Upstream = "payments" },
			want: []problem{{"services[1].upstream", `unknown upstream "payments"`, "did you mean"}}},

		// split
		{name: "one target", mutate: func(s *Spec) {
			api(s).Split.Targets = targets(s)[:1]
			api(s).Split.CanaryAnalysis = nil
		}, want: []problem{{tg, "must list 2..8 targets, got 1", ""}}},
		{name: "eight targets", mutate: func(s *Spec) { manyTargets(s, 8) }},
		{name: "nine targets", mutate: func(s *Spec) { manyTargets(s, 9) },
			want: []problem{{tg, "must list 2..8 targets, got 9", ""}}},
		{name: "target upstream repeated", mutate: func(s *Spec) { targets(s)[1].Upstream = "api-stable" },
			want: []problem{{tg + "[1].upstream", `upstream "api-stable" is already a target (also services[0].split.targets[0])`, ""}}},
		{name: "target upstream unknown", mutate: func(s *Spec) { targets(s)[1].Upstream = "api-canry" },
			want: []problem{{tg + "[1].upstream", `unknown upstream "api-canry"; did you mean "api-canary"?`, ""}}},
		{name: "target upstream empty", mutate: func(s *Spec) { targets(s)[0].Upstream = "" },
			want: []problem{{tg + "[0].upstream", "is required", ""}}},
		{name: "weight zero", mutate: weights(100, 0)},
		{name: "weight 1000000", mutate: weights(1_000_000, 0)},
		{name: "weight negative", mutate: weights(95, -1),
			want: []problem{{tg + "[1].weight", "must be 0..1000000, got -1", ""}}},
		{name: "weight above maximum", mutate: weights(0, 1_000_001),
			want: []problem{{tg + "[1].weight", "must be 0..1000000, got 1000001", ""}}},
		{name: "total zero", mutate: weights(0, 0),
			want: []problem{{tg, "total weight must be 1..1000000, got 0", ""}}},
		{name: "total above maximum", mutate: weights(999_999, 2),
			want: []problem{{tg, "total weight must be 1..1000000, got 1000001", ""}}},

		// canary analysis
		{name: "canary zeros take defaults", mutate: func(s *Spec) {
			c := ca(s)
			c.WindowSeconds, c.Step, c.MinRequests, c.CooldownSeconds = 0, 0, 0, 0
		}},
		{name: "canary with three targets", mutate: func(s *Spec) {
			api(s).Split.Targets = append(targets(s), Target{Upstream: "extra", Weight: 1})
			s.Upstreams = append(s.Upstreams, Upstream{Name: "extra", Endpoints: []string{"10.0.0.9:80"}})
		}, want: []problem{{canary, "needs exactly 2 targets (baseline, canary), got 3", ""}}},
		{name: "canary window negative", mutate: func(s *Spec) { ca(s).WindowSeconds = -1 },
			want: []problem{{canary + ".window_seconds", "must be 1..3600, got -1", ""}}},
		{name: "canary window 3601", mutate: func(s *Spec) { ca(s).WindowSeconds = 3601 },
			want: []problem{{canary + ".window_seconds", "must be 1..3600, got 3601", ""}}},
		{name: "canary step equal to total", mutate: func(s *Spec) { ca(s).Step = 100 }},
		{name: "canary step above total", mutate: func(s *Spec) { ca(s).Step = 101 },
			want: []problem{{canary + ".step", "must be 1..100 (the total weight), got 101", ""}}},
		{name: "canary step negative", mutate: func(s *Spec) { ca(s).Step = -5 },
			want: []problem{{canary + ".step", "must be 1..100 (the total weight), got -5", ""}}},
		{name: "canary step with invalid weights", mutate: func(s *Spec) { weights(-1, 5)(s); ca(s).Step = -5 },
			want: []problem{
				{tg + "[0].weight", "must be 0..1000000, got -1", ""},
				{canary + ".step", "must be at least 1, got -5", ""},
			}},
		{name: "canary min requests negative", mutate: func(s *Spec) { ca(s).MinRequests = -1 },
			want: []problem{{canary + ".min_requests", "must be at least 1, got -1", ""}}},
		{name: "canary cooldown 86400", mutate: func(s *Spec) { ca(s).CooldownSeconds = 86_400 }},
		{name: "canary cooldown above a day", mutate: func(s *Spec) { ca(s).CooldownSeconds = 86_401 },
			want: []problem{{canary + ".cooldown_seconds", "must be 0..86400, got 86401", ""}}},
		{name: "canary cooldown negative", mutate: func(s *Spec) { ca(s).CooldownSeconds = -1 },
			want: []problem{{canary + ".cooldown_seconds", "must be 0..86400, got -1", ""}}},
		{name: "canary steps", mutate: func(s *Spec) {
			ca(s).Steps = []int{1, 5, 10, 25, 50, 100}
			ca(s).HoldSeconds = 300
			ca(s).Gate = GateFinal
		}},
		{name: "canary steps not increasing", mutate: func(s *Spec) { ca(s).Steps = []int{5, 5, 100} },
			want: []problem{{canary + ".steps[1]", "must be above the step before it (5): steps are strictly increasing, got 5", ""}}},
		{name: "canary step of 0%", mutate: func(s *Spec) { ca(s).Steps = []int{0, 100} },
			want: []problem{{canary + ".steps[0]", "must be a share in percent, 1..100, got 0", ""}}},
		{name: "canary step above 100%", mutate: func(s *Spec) { ca(s).Steps = []int{50, 101} },
			want: []problem{{canary + ".steps[1]", "must be a share in percent, 1..100, got 101", ""}}},
		{name: "canary steps not ending at 100", mutate: func(s *Spec) { ca(s).Steps = []int{10, 50} },
			want: []problem{{canary + ".steps[1]", "the last step must be 100 (the canary at the whole total), got 50", ""}}},
		{name: "canary steps empty", mutate: func(s *Spec) { ca(s).Steps = []int{} },
			want: []problem{{canary + ".steps", "must list 1..20 shares in percent, got 0", ""}}},
		{name: "canary steps beside step", mutate: func(s *Spec) { ca(s).Steps = []int{50, 100}; ca(s).Step = 10 },
			want: []problem{{canary + ".step", "steps replaces step; leave step out", ""}}},
		{name: "canary steps finer than the total", mutate: func(s *Spec) { weights(9, 1)(s); ca(s).Step = 0; ca(s).Steps = []int{10, 14, 100} },
			want: []problem{{canary + ".steps[1]", "14% of the total weight 10 is weight 1, no more than the step before it", ""}}},
		{name: "canary steps on a total below the default step", mutate: func(s *Spec) { weights(2, 1)(s); ca(s).Step = DefaultCanaryStep; ca(s).Steps = []int{34, 67, 100} }},
		{name: "canary gate unknown", mutate: func(s *Spec) { ca(s).Gate = "always" },
			want: []problem{{canary + ".gate", `unknown gate "always"; allowed: auto, manual, final`, ""}}},
		{name: "canary hold negative", mutate: func(s *Spec) { ca(s).HoldSeconds = -1 },
			want: []problem{{canary + ".hold_seconds", "must be 0..86400, got -1", ""}}},
		{name: "canary local brake after 30", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{AfterSeconds: new(30)} }},
		{name: "canary local brake off", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{Enabled: new(false)} }},
		{name: "canary local brake on, default after", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{Enabled: new(true)} }},
		{name: "canary local brake after 0", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{AfterSeconds: new(0)} },
			want: []problem{{canary + ".local_brake.after_seconds", "must be 1..3600 seconds without word from the canary runner (default 10); to turn the brake off, set enabled: false, got 0", ""}}},
		{name: "canary local brake after above an hour", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{AfterSeconds: new(3601)} },
			want: []problem{{canary + ".local_brake.after_seconds", "must be 1..3600", ""}}},
		{name: "canary local brake off with after", mutate: func(s *Spec) { ca(s).LocalBrake = &LocalBrake{Enabled: new(false), AfterSeconds: new(5)} },
			want: []problem{{canary + ".local_brake.after_seconds", "does nothing with enabled: false", ""}}},
		{name: "canary relative rollback", mutate: func(s *Spec) {
			ca(s).Rollback = Threshold{Metric: MetricErrorRate, Relative: &Relative{Margin: 0.005, Factor: 2}, ForSeconds: 120}
			ca(s).MinConfidence = 0.95
		}},
		{name: "canary relative latency promote", mutate: func(s *Spec) {
			ca(s).Promote = Threshold{Metric: MetricLatencyP99, Relative: &Relative{Factor: 1.2}}
		}},
		{name: "canary relative empty", mutate: func(s *Spec) { ca(s).Rollback.Relative = &Relative{} },
			want: []problem{{canary + ".rollback.relative", "needs margin, factor or both above 0", ""}}},
		{name: "canary relative factor below 1", mutate: func(s *Spec) { ca(s).Rollback.Relative = &Relative{Factor: 0.5} },
			want: []problem{{canary + ".rollback.relative.factor", "must be in [1, 1000]", ""}}},
		{name: "canary relative margin negative", mutate: func(s *Spec) { ca(s).Rollback.Relative = &Relative{Margin: -0.1} },
			want: []problem{{canary + ".rollback.relative.margin", "must be in [0, 1]", ""}}},
		{name: "canary promote for_seconds", mutate: func(s *Spec) { ca(s).Promote.ForSeconds = 10 },
			want: []problem{{promote + ".for_seconds", "is for rollback only; a promotion waits with hold_seconds", ""}}},
		{name: "canary rollback for_seconds negative", mutate: func(s *Spec) { ca(s).Rollback.ForSeconds = -1 },
			want: []problem{{canary + ".rollback.for_seconds", "must be 0..86400, got -1", ""}}},
		{name: "canary min_confidence 1", mutate: func(s *Spec) { ca(s).MinConfidence = 1 },
			want: []problem{{canary + ".min_confidence", "must be in (0, 1)", ""}}},
		{name: "canary min_confidence on latency", mutate: func(s *Spec) {
			ca(s).MinConfidence = 0.9
			ca(s).Rollback = Threshold{Metric: MetricLatencyP99, Threshold: 0.5}
			ca(s).Promote = Threshold{Metric: MetricLatencyP99, Threshold: 0.2}
		}, want: []problem{{canary + ".min_confidence", "needs rollback.metric error_rate", ""}}},
		{name: "canary webhooks", mutate: func(s *Spec) {
			ca(s).Webhooks = []Webhook{
				{Name: "smoke", Type: WebhookPreRollout, URL: "http://127.0.0.1:7000/check", TimeoutS: 5},
				{Name: "chat", Type: WebhookEvent, URL: "https://hooks.example.com/services/T0/B0?x=1"},
			}
		}},
		{name: "canary webhook of another scheme", mutate: func(s *Spec) { ca(s).Webhooks = []Webhook{{Name: "a", Type: WebhookEvent, URL: "ftp://127.0.0.1/x"}} },
			want: []problem{{canary + ".webhooks[0].url", `scheme must be http or https, got "ftp"`, ""}}},
		{name: "canary webhook to the metadata address", mutate: func(s *Spec) {
			ca(s).Webhooks = []Webhook{{Name: "a", Type: WebhookEvent, URL: "http://169.254.169.254/latest"}}
		}, want: []problem{{canary + ".webhooks[0].url", "link-local or metadata address", ""}}},
		{name: "canary webhook with userinfo", mutate: func(s *Spec) {
			ca(s).Webhooks = []Webhook{{Name: "a", Type: WebhookEvent, URL: "http://u:p@127.0.0.1/"}}
		},
			want: []problem{{canary + ".webhooks[0].url", "must not contain userinfo", ""}}},
		{name: "canary webhook of an unknown type", mutate: func(s *Spec) { ca(s).Webhooks = []Webhook{{Name: "a", Type: "slack", URL: "http://127.0.0.1/"}} },
			want: []problem{{canary + ".webhooks[0].type", `unknown webhook type "slack"; allowed: pre_rollout, rollout, confirm_promotion, post_rollout, event`, ""}}},
		{name: "canary webhooks of one name", mutate: func(s *Spec) {
			ca(s).Webhooks = []Webhook{{Name: "a", Type: WebhookEvent, URL: "http://127.0.0.1/"}, {Name: "a", Type: WebhookRollout, URL: "http://127.0.0.1/"}}
		}, want: []problem{{canary + ".webhooks[1].name", `duplicate webhook name "a"`, ""}}},
		{name: "canary webhook timeout above a minute", mutate: func(s *Spec) {
			ca(s).Webhooks = []Webhook{{Name: "a", Type: WebhookEvent, URL: "http://127.0.0.1/", TimeoutS: 61}}
		}, want: []problem{{canary + ".webhooks[0].timeout_s", "must be 0..60, got 61", ""}}},
		{name: "managed by argo-rollouts", mutate: func(s *Spec) { api(s).Split.ManagedBy = "argo-rollouts" }},
		{name: "managed by an invalid name", mutate: func(s *Spec) { api(s).Split.ManagedBy = "Argo Rollouts" },
			want: []problem{{"services[0].split.managed_by", `invalid manager "Argo Rollouts"; must match`, ""}}},
		{name: "canary metric unknown", mutate: func(s *Spec) { ca(s).Promote.Metric = "p50" },
			want: []problem{{promote + ".metric", `unknown metric "p50"; allowed: error_rate, latency_p99`, ""}}},
		{name: "canary metric missing", mutate: func(s *Spec) { ca(s).Rollback.Metric = "" },
			want: []problem{{canary + ".rollback.metric", "is required; allowed: error_rate, latency_p99", ""}}},
		{name: "error rate threshold 0 and 1", mutate: func(s *Spec) { ca(s).Promote.Threshold, ca(s).Rollback.Threshold = 0, 1 }},
		{name: "error rate threshold above 1", mutate: func(s *Spec) { ca(s).Rollback.Threshold = 1.5 },
			want: []problem{{canary + ".rollback.threshold", "must be in [0, 1] for error_rate", ""}}},
		{name: "error rate threshold negative", mutate: func(s *Spec) { ca(s).Promote.Threshold = -0.1 },
			want: []problem{{promote + ".threshold", "must be in [0, 1] for error_rate", ""}}},
		{name: "error rate threshold NaN", mutate: func(s *Spec) { ca(s).Promote.Threshold = math.NaN() },
			want: []problem{{promote + ".threshold", "must be in [0, 1] for error_rate", ""}}},
		{name: "latency thresholds", mutate: func(s *Spec) {
			ca(s).Promote = Threshold{Metric: MetricLatencyP99, Threshold: 0.25}
			ca(s).Rollback = Threshold{Metric: MetricLatencyP99, Threshold: 600}
		}},
		{name: "latency threshold zero", mutate: func(s *Spec) { ca(s).Promote = Threshold{Metric: MetricLatencyP99} },
			want: []problem{{promote + ".threshold", "must be in (0, 600] for latency_p99 (seconds), got 0", ""}}},
		{name: "latency threshold above 600", mutate: func(s *Spec) { ca(s).Promote = Threshold{Metric: MetricLatencyP99, Threshold: 601} },
			want: []problem{{promote + ".threshold", "must be in (0, 600] for latency_p99", ""}}},
		{name: "promote equal to rollback", mutate: func(s *Spec) { ca(s).Promote.Threshold = 0.05 },
			want: []problem{{promote + ".threshold", "must be below rollback.threshold (0.05) when both use error_rate, got 0.05", ""}}},
		{name: "promote above rollback", mutate: func(s *Spec) { ca(s).Promote.Threshold = 0.5 },
			want: []problem{{promote + ".threshold", "must be below rollback.threshold", ""}}},
		{name: "different metrics are not compared", mutate: func(s *Spec) {
			ca(s).Promote = Threshold{Metric: MetricLatencyP99, Threshold: 0.5}
		}},

		// sticky
		{name: "cookie of 64 characters", mutate: cookie(strings.Repeat("c", 64))},
		{name: "cookie with token characters", mutate: cookie("__Host-dwara.id!#$%&'*+^`|~")},
		{name: "cookie empty", mutate: cookie(""),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token of 1..64 characters", ""}}},
		{name: "cookie of 65 characters", mutate: cookie(strings.Repeat("c", 65)),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token", ""}}},
		{name: "cookie with space", mutate: cookie("a b"),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token", ""}}},
		{name: "cookie with separator", mutate: cookie("a=b"),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token", ""}}},
		{name: "cookie with tab", mutate: cookie("a\tb"),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token", ""}}},
		{name: "cookie with non-ASCII", mutate: cookie("café"),
			want: []problem{{"services[0].sticky.cookie", "must be an RFC 6265 token", ""}}},
		{name: "sticky ttl zero takes default", mutate: func(s *Spec) { api(s).Sticky.TTLSeconds = 0 }},
		{name: "sticky ttl 30 days", mutate: func(s *Spec) { api(s).Sticky.TTLSeconds = 2_592_000 }},
		{name: "sticky ttl above 30 days", mutate: func(s *Spec) { api(s).Sticky.TTLSeconds = 2_592_001 },
			want: []problem{{"services[0].sticky.ttl_s", "must be 1..2592000, got 2592001", ""}}},
		{name: "sticky ttl negative", mutate: func(s *Spec) { api(s).Sticky.TTLSeconds = -1 },
			want: []problem{{"services[0].sticky.ttl_s", "must be 1..2592000, got -1", ""}}},

		// base path
		{name: "base path root", mutate: basePath("/")},
		{name: "base path empty means root", mutate: basePath("")},
		{name: "base path nested", mutate: basePath("/api/v1.2/x-y")},
		{name: "base path relative", mutate: basePath("v1"),
			want: []problem{{"services[0].base_path", `must start with "/", got "v1"`, ""}}},
		{name: "base path trailing slash", mutate: basePath("/v1/"),
			want: []problem{{"services[0].base_path", `must not end with "/" (write "/v1")`, ""}}},
		{name: "base path with query", mutate: basePath("/v1?x=1"),
			want: []problem{{"services[0].base_path", `must not contain "?" or "#"`, ""}}},
		{name: "base path with fragment", mutate: basePath("/v1#x"),
			want: []problem{{"services[0].base_path", `must not contain "?" or "#"`, ""}}},
		{name: "base path double slash", mutate: basePath("/a//b"),
			want: []problem{{"services[0].base_path", `must not contain "//"`, ""}}},
		{name: "base path dot segment", mutate: basePath("/a/./b"),
			want: []problem{{"services[0].base_path", `must not contain "." or ".." segments`, ""}}},
		{name: "base path dot-dot segment", mutate: basePath("/a/../b"),
			want: []problem{{"services[0].base_path", `must not contain "." or ".." segments`, ""}}},
		{name: "base path ending in dot-dot", mutate: basePath("/a/.."),
			want: []problem{{"services[0].base_path", `must not contain "." or ".." segments`, ""}}},
		{name: "base path with dots inside a segment", mutate: basePath("/a..b/.c")},
		{name: "base path with space", mutate: basePath("/a b"),
			want: []problem{{"services[0].base_path", "must not contain spaces", ""}}},

		// host
		{name: "host IPv4", mutate: host("10.0.0.1")},
		{name: "host IPv6", mutate: host("2001:db8::1")},
		{name: "host with digits and dashes", mutate: host("a-1.example-2.com")},
		{name: "host uppercase", mutate: host("Example.com"),
			want: []problem{{"services[1].host", `must be lowercase ("example.com")`, ""}}},
		{name: "host IPv6 uppercase", mutate: host("2001:DB8::1"),
			want: []problem{{"services[1].host", `must be lowercase ("2001:db8::1")`, ""}}},
		{name: "host with port", mutate: host("example.com:8080"),
			want: []problem{{"services[1].host", "must not include a port", ""}}},
		{name: "host IPv4 with port", mutate: host("10.0.0.1:8080"),
			want: []problem{{"services[1].host", "must not include a port", ""}}},
		{name: "host IPv6 in brackets", mutate: host("[::1]"),
			want: []problem{{"services[1].host", "without brackets or port", ""}}},
		{name: "host IPv6 not canonical", mutate: host("0:0::1"),
			want: []problem{{"services[1].host", `canonical form "::1"`, ""}}},
		{name: "host IPv6 zone", mutate: host("fe80::1%eth0"),
			want: []problem{{"services[1].host", "zone", ""}}},
		{name: "host with space", mutate: host("exa mple.com"),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},
		{name: "host with empty label", mutate: host("a..com"),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},
		{name: "host label starting with dash", mutate: host("-a.com"),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},
		{name: "host with trailing dot", mutate: host("example.com."),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},
		{name: "host mistyped IPv4", mutate: host("10.0.0.256"),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},
		{name: "host wildcard", mutate: host("*.example.com"),
			want: []problem{{"services[1].host", "must be a DNS name", ""}}},

		// routes
		{name: "same base path on other host", mutate: func(s *Spec) { web(s).BasePath = "/v1" }},
		{name: "same host and base path", mutate: func(s *Spec) {
			s.Services = append(s.Services, Service{Name: "web2", Host: "example.com", BasePath: "/", Upstream: "api-canary"})
		}, want: []problem{{"services[2].base_path", `host "example.com" and base_path "/" are already routed by services[1]`, ""}}},
		{name: "empty base path collides with root", mutate: func(s *Spec) {
			s.Services = append(s.Services, Service{Name: "web2", Host: "example.com", Upstream: "api-canary"})
		}, want: []problem{{"services[2].base_path", "already routed by services[1]", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := validSpec()
			tt.mutate(s)
			checkProblems(t, s.Validate(), tt.want...)
		})
	}
}

// endpoints returns n distinct endpoints.
func endpoints(n int) []string {
	eps := make([]string, n)
	for i := range eps {
		eps[i] = fmt.Sprintf("10.0.0.1:%d", 8000+i)
	}
	return eps
}

// manyTargets gives services[0] a split of n targets over n upstreams.
func manyTargets(s *Spec, n int) {
	s.Services[0].Split = &Split{}
	for i := range n {
		name := fmt.Sprintf("u%d", i)
		s.Upstreams = append(s.Upstreams, Upstream{Name: name, Endpoints: []string{"10.0.0.1:80"}})
		s.Services[0].Split.Targets = append(s.Services[0].Split.Targets, Target{Upstream: name, Weight: 1})
	}
}

func TestValidateReportsEveryProblemInOrder(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Upstreams[0].Balancer = "fastest"
	s.Upstreams[1].Endpoints = []string{"nowhere"}
	s.Services[0].Split.Targets[1].Upstream = "api-canry"
	s.Services[0].Split.CanaryAnalysis.Rollback.Metric = "p99"
	s.Services[0].Sticky.TTLSeconds = -1
	s.Services[1].Host = "Example.com"
	s.Services[1].Upstream = ""
	checkProblems(t, s.Validate(),
		problem{"upstreams[0].balancer", `unknown balancer "fastest"`, ""},
		problem{"upstreams[1].endpoints[0]", "must be host:port", ""},
		problem{"services[0].split.targets[1].upstream", `did you mean "api-canary"?`, ""},
		problem{"services[0].split.canary_analysis.rollback.metric", `unknown metric "p99"`, ""},
		problem{"services[0].sticky.ttl_s", "must be 1..2592000", ""},
		problem{"services[1].host", "must be lowercase", ""},
		problem{"services[1]", "one of upstream or split is required", ""},
	)
}

func TestValidateDoesNotModify(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Upstreams[0].Balancer = ""
	s.Upstreams[0].HealthCheck = &HealthCheck{}
	s.Services[0].BasePath = ""
	before := s.Clone()
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, before) {
		t.Errorf("Validate modified the spec:\n got %+v\nwant %+v", s, before)
	}
}

func TestValidateNil(t *testing.T) {
	t.Parallel()
	var s *Spec
	checkProblems(t, s.Validate(), problem{"", "the spec is empty", ""})
}

func TestValidationErrorString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  *ValidationError
		want string
	}{
		{"none", &ValidationError{}, "invalid spec"},
		{"one", &ValidationError{Errors: []FieldError{{Path: "services", Message: "at least one service is required"}}},
			"services: at least one service is required"},
		{"document and field", &ValidationError{Errors: []FieldError{
			{Message: "the spec is empty"},
			{Path: "a.b", Message: "c"},
		}}, "the spec is empty; a.b: c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestQuoteShortensLongValues(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Services[1].Upstream = strings.Repeat("x", 100_000)
	err := s.Validate()
	if err == nil || len(err.Error()) > 500 {
		t.Fatalf("error = %.600v; want a short error", err)
	}
	checkProblems(t, err, problem{"services[1].upstream", `unknown upstream "xxxx`, "did you mean"})
}

func TestParseEndpoint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
	}{
		{"127.0.0.1:9001", "http://127.0.0.1:9001"},
		{"Backend.Internal:080", "http://backend.internal:80"},
		{"https://[2001:DB8::1]:8443/", "https://[2001:db8::1]:8443"},
		{"http://svc_a:1", "http://svc_a:1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			u, err := ParseEndpoint(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := u.String(); got != tt.want {
				t.Errorf("ParseEndpoint(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestDialControl: the policy holds for the address a name resolved to,
// as the dialers of the data plane see it.
func TestDialControl(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		addr           string
		allowLinkLocal bool
		ok             bool
	}{
		{"127.0.0.1:80", false, true},
		{"10.1.2.3:443", false, true},
		{"[2001:db8::1]:80", false, true},
		{"0.0.0.0:80", false, false},
		{"0.0.0.0:80", true, false},
		{"[::]:80", true, false},
		{"[::ffff:0.0.0.0]:80", false, false},
		{"169.254.169.254:80", false, false},
		{"169.254.169.254:80", true, true},
		{"[::ffff:169.254.169.254]:80", false, false},
		{"[fe80::1]:80", false, false},
		{"[fe80::1]:80", true, true},
		{"[fd00:ec2::254]:80", false, false},
		{"not-an-address:80", true, false},
	} {
		err := DialControl(c.allowLinkLocal)("tcp", c.addr, nil)
		if (err == nil) != c.ok {
			t.Errorf("DialControl(%v)(%s) = %v, want ok %v", c.allowLinkLocal, c.addr, err, c.ok)
		}
	}
}
