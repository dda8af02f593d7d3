// Package config owns the generation spec: the types an operator writes, strict
// JSON and YAML parsing, defaults, and validation that reports every error of a
// spec at once with its field path. It also compares two specs: Diff says what
// changed in each service and upstream, and Displacement the share of request
// keys a change of a service's targets moves to another upstream.
//
// The data plane compiles a spec with the same code the API uses to validate
// it, so whatever the API accepts the proxy can serve.
package config

// Balancer names accepted in Upstream.Balancer.
const (
	BalancerRoundRobin = "round_robin"
	BalancerLeastConn  = "least_conn"
	BalancerIPHash     = "ip_hash"
	BalancerPeakEWMA   = "peak_ewma"
)

// Canary metric names accepted in Threshold.Metric.
const (
	MetricErrorRate  = "error_rate"
	MetricLatencyP99 = "latency_p99"
	// MetricTTFTP99 is the p99 time to the first streamed token, in
	// seconds: a metric of a model alias's canary_analysis only.
	MetricTTFTP99 = "ttft_p99"
)

// Spec is one generation of routing configuration. The zero value is an empty
// spec, which fails validation (it has no services).
type Spec struct {
	Upstreams []Upstream `json:"upstreams"`
	Services  []Service  `json:"services"`
}

// Upstream is a named pool of endpoints with one balancer.
type Upstream struct {
	// Name matches [a-z0-9][a-z0-9._-]{0,62} and is unique among upstreams.
	Name string `json:"name"`
	// Balancer is one of the Balancer* constants; "" means round_robin
	// (Defaults fills it in).
	Balancer string `json:"balancer,omitempty"`
	// Endpoints holds 1..64 entries, each host:port or http(s)://host:port.
	Endpoints []string `json:"endpoints"`
	// HealthCheck, when non-nil, enables active health checks.
	HealthCheck *HealthCheck `json:"health_check,omitempty"`
	// Passive tunes the passive checks, which watch the proxied requests
	// of every upstream whether or not it sets Passive; nil means the
	// defaults (eject after DefaultPassiveConsecutiveFailures transport
	// failures in a row, 5xx answers not counted).
	Passive *Passive `json:"passive,omitempty"`
	// ConnectTimeoutMS bounds opening a connection to an endpoint
	// (1..60000); 0 means DefaultConnectTimeoutMS (Defaults fills it in).
	ConnectTimeoutMS int `json:"connect_timeout_ms,omitempty"`
	// ResponseHeaderTimeoutMS bounds the wait for an endpoint's response
	// header once the request is sent (1..3600000): past it the client gets
	// 504. A body that streams after its header is never cut by it. 0 means
	// DefaultResponseHeaderTimeoutMS.
	ResponseHeaderTimeoutMS int `json:"response_header_timeout_ms,omitempty"`
	// IdleTimeoutMS is how long an idle pooled connection to an endpoint is
	// kept (1..3600000); 0 means DefaultIdleTimeoutMS.
	IdleTimeoutMS int `json:"idle_timeout_ms,omitempty"`
	// AllowLinkLocal lets the endpoints be link-local addresses
	// (169.254.0.0/16, fe80::/10) or a cloud metadata address
	// (169.254.169.254, fd00:ec2::254), written or resolved; false refuses
	// them (see CheckAddress).
	AllowLinkLocal bool `json:"allow_link_local,omitempty"`
}

// HealthCheck configures active health checks of an upstream's endpoints.
// Zero numeric fields are filled in by Defaults.
type HealthCheck struct {
	Path               string `json:"path"`
	IntervalS          int    `json:"interval_s"`
	TimeoutS           int    `json:"timeout_s"`
	HealthyThreshold   int    `json:"healthy_threshold"`
	UnhealthyThreshold int    `json:"unhealthy_threshold"`
	// ExpectedStatus is the range of answer codes that pass a check; zero
	// fields mean DefaultExpectedStatusMin..DefaultExpectedStatusMax
	// (200..399; Defaults fills them in).
	ExpectedStatus StatusRange `json:"expected_status"`
}

// StatusRange is an inclusive range of HTTP status codes, 100..599.
type StatusRange struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// Contains reports whether code is in the range.
func (r StatusRange) Contains(code int) bool { return r.Min <= code && code <= r.Max }

// Passive tunes the passive checks of an upstream's endpoints, which judge
// them by the proxied requests themselves. Zero fields mean the defaults.
type Passive struct {
	// ConsecutiveFailures is how many transport failures in a row
	// (connection refused or reset, connect or response-header timeout:
	// no answer header) eject an endpoint, 1..100; 0 means
	// DefaultPassiveConsecutiveFailures (Defaults fills it in).
	ConsecutiveFailures int `json:"consecutive_failures"`
	// Consecutive5xx, when positive (1..100), ejects an endpoint after that
	// many 5xx answers in a row as well; 0 turns this off.
	Consecutive5xx int `json:"consecutive_5xx"`
}

// Service routes requests matched by Host and BasePath to one upstream or to a
// weighted split of upstreams. Exactly one of Upstream and Split is set.
type Service struct {
	Name string `json:"name"`
	// BasePath is matched as the longest prefix on path-segment boundaries;
	// "" means "/" (Defaults fills it in).
	BasePath string `json:"base_path"`
	// Host, when not empty, must equal the request's Host (port stripped,
	// case-insensitive).
	Host     string  `json:"host,omitempty"`
	Upstream string  `json:"upstream,omitempty"`
	Split    *Split  `json:"split,omitempty"`
	Sticky   *Sticky `json:"sticky,omitempty"`
	// Override, when non-nil, lets a request pick its target by name (see
	// Override); nil ignores such headers.
	Override *Override `json:"override,omitempty"`
	// Mirror, when non-nil, also sends a share of the service's requests
	// to another upstream, asynchronously, and drops its answers (see
	// Mirror); nil mirrors nothing.
	Mirror *Mirror `json:"mirror,omitempty"`
	// Models are the service's model aliases for OpenAI-compatible APIs
	// (see ModelAlias): a POST to /chat/completions, /completions,
	// /embeddings or /responses under BasePath whose body names an alias
	// is served by the alias's pick; any other request by Upstream or
	// Split as usual. nil: no body is read.
	Models []ModelAlias `json:"models,omitempty"`
	// MaxBodyBytes bounds the request body read to find the model
	// (1..MaxModelBodyBytes; 413 beyond it); 0 means
	// DefaultModelMaxBodyBytes. Only a service with Models may set it.
	MaxBodyBytes int `json:"max_body_bytes,omitempty"`
	// Cache, when non-nil, keeps the service's cacheable answers in
	// memory, per branch (see Cache); nil caches nothing, at no cost.
	Cache *Cache `json:"cache,omitempty"`
}

// Mirror sends a copy of a share of a service's requests (shadow traffic)
// to Upstream, besides the real request, which is served as if there were
// no mirror: the copy is sent in the background, its answer is read and
// dropped, and a slow, failing or absent mirror never delays or fails the
// real request. The share is chosen by a hash of the request's key (the
// sticky handle, else the request id) salted apart from the split's, so
// the choice is reproducible and independent of the branch. Copies carry
// X-Dwara-Mirror: 1 and the real request's X-Request-Id.
type Mirror struct {
	// Upstream is a declared upstream, not one of the service's own
	// targets.
	Upstream string `json:"upstream"`
	// Percent is the share of requests mirrored, 0 < Percent <= 100, in
	// steps of 0.01.
	Percent float64 `json:"percent"`
	// MaxBodyBytes is the largest request body that is mirrored,
	// 0..MaxMirrorBodyBytes; a request with a longer body, or a body of
	// unknown length (chunked), is not mirrored. 0 mirrors only requests
	// without a body. When decoded from JSON or YAML an absent value means
	// DefaultMirrorMaxBodyBytes; a Mirror built in Go without it has 0.
	MaxBodyBytes int `json:"max_body_bytes"`
}

// Override lets a request name the target that serves it: a request whose
// Header holds the upstream name of one of the service's targets is served
// by that target whatever the weights (a target at weight 0 included),
// never mints or changes the sticky cookie, and is counted in
// dwara_split_forced_total; a name that is not a target is refused with
// 400. Use it to test a branch on purpose, a parked canary included.
type Override struct {
	// Header is the request header field that names the target, e.g.
	// X-Dwara-Branch; an HTTP token, not a field the gateway sets or the
	// connection needs.
	Header string `json:"header"`
}

// Allocation names accepted in Split.Allocation.
const (
	// AllocationHash picks by hash % total weight (the default): a change
	// of the total reshuffles keys.
	AllocationHash = "hash"
	// AllocationStable picks by a slot table of split.Slots slots stored
	// in the spec (Split.Slots), which a change of weights rewrites with
	// the fewest moved slots.
	AllocationStable = "stable"
)

// Split is a deterministic weighted split over 2..8 targets.
type Split struct {
	Targets []Target `json:"targets"`
	// Allocation is AllocationHash ("" means hash) or AllocationStable.
	Allocation     string          `json:"allocation,omitempty"`
	CanaryAnalysis *CanaryAnalysis `json:"canary_analysis,omitempty"`
	// Match are rules checked in order before the weighted pick; the first
	// whose conditions a request meets serves it (see MatchRule).
	Match []MatchRule `json:"match,omitempty"`
	// ManagedBy, when not empty, names what drives this split's weights
	// from outside (e.g. "argo-rollouts"): the canary controller then
	// never acts on it. It follows the name rule of upstreams.
	ManagedBy string `json:"managed_by,omitempty"`
	// Slots is the computed slot table of a stable split, run-length
	// encoded: [target index, run length] pairs that cover slots 0..9999 in
	// order, adjacent runs of different targets (see EncodeSlots). The API
	// computes it when it stores a generation (from the parent
	// generation's table); it is validated strictly when present, and only
	// a stable split may carry it.
	Slots [][]int `json:"slots,omitempty"`
}

// Target is one weighted upstream of a split. When decoded from JSON or YAML
// an absent weight means 1; a Target built in Go with no Weight has weight 0.
type Target struct {
	Upstream string `json:"upstream"`
	Weight   int    `json:"weight"`
}

// CanaryAnalysis configures the auto-canary controller for a 2-target split:
// Targets[0] is the baseline and Targets[1] the canary.
type CanaryAnalysis struct {
	Enabled       bool `json:"enabled"`
	WindowSeconds int  `json:"window_seconds"`
	// Step is the weight each promotion or rollback moves when Steps is
	// empty.
	Step            int `json:"step"`
	MinRequests     int `json:"min_requests"`
	CooldownSeconds int `json:"cooldown_seconds"`
	// Steps, when not empty, is the schedule of the canary's share in
	// percent of the total, strictly increasing, ending at 100; it
	// replaces Step. Each share is the weight round(total * share / 100).
	Steps []int `json:"steps,omitempty"`
	// HoldSeconds is how long every evaluation at a step must judge the
	// canary clean before the next step; 0 means no hold.
	HoldSeconds int `json:"hold_seconds,omitempty"`
	// Gate is GateAuto ("" means auto), GateManual or GateFinal.
	Gate string `json:"gate,omitempty"`
	// MinConfidence, when above 0 (below 1), makes a rollback that is not
	// severe also need the p-value of the canary's error rate against the
	// baseline's below 1 - MinConfidence; rollback.metric must then be
	// error_rate.
	MinConfidence float64 `json:"min_confidence,omitempty"`
	// Webhooks are the group's HTTP hooks (see the Webhook* types).
	Webhooks []Webhook `json:"webhooks,omitempty"`
	// LocalBrake configures every proxy's local brake (see LocalBrake);
	// nil means on, after DefaultLocalBrakeAfterS.
	LocalBrake *LocalBrake `json:"local_brake,omitempty"`
	Promote    Threshold   `json:"promote"`
	Rollback   Threshold   `json:"rollback"`
}

// LocalBrake is canary_analysis.local_brake: a proxy that has heard
// nothing from the canary runner for AfterSeconds, and whose own window
// shows the canary's rollback metric above twice the rollback threshold
// with at least min_requests, puts the canary at 0 on its own. The zero
// value (and a nil *LocalBrake) is on, after DefaultLocalBrakeAfterS.
type LocalBrake struct {
	// Enabled false turns the brake off; nil means on.
	Enabled *bool `json:"enabled,omitempty"`
	// AfterSeconds is how long a proxy must have heard nothing from the
	// runner before it may brake, 1..MaxLocalBrakeAfterS; nil means
	// DefaultLocalBrakeAfterS.
	AfterSeconds *int `json:"after_seconds,omitempty"`
}

// Local brake bounds (canary_analysis.local_brake.after_seconds).
const (
	DefaultLocalBrakeAfterS = 10
	MaxLocalBrakeAfterS     = 3600
)

// Brake returns whether ca's local brake is on and, when it is, after how
// many seconds without word from the runner it may act. A nil ca has no
// brake.
func (ca *CanaryAnalysis) Brake() (afterSeconds int, on bool) {
	if ca == nil {
		return 0, false
	}
	lb := ca.LocalBrake
	if lb == nil {
		return DefaultLocalBrakeAfterS, true
	}
	if lb.Enabled != nil && !*lb.Enabled {
		return 0, false
	}
	if lb.AfterSeconds == nil {
		return DefaultLocalBrakeAfterS, true
	}
	return *lb.AfterSeconds, true
}

// Gates of CanaryAnalysis.Gate: which steps up wait for an operator's
// POST /api/v1/services/{name}/canary/promote.
const (
	// GateAuto: none; the controller promotes on its own.
	GateAuto = "auto"
	// GateManual: every step up waits.
	GateManual = "manual"
	// GateFinal: only the step to the whole total (100%) waits.
	GateFinal = "final"
)

// StepWeight returns the canary weight of a share of percent (0..100) of
// total: round(total * percent / 100), halves up.
func StepWeight(total, percent int) int {
	return (total*percent*2 + 100) / 200
}

// Threshold compares one canary metric against a bound. latency_p99 is in
// seconds; error_rate is a fraction in [0, 1].
type Threshold struct {
	Metric string `json:"metric"`
	// Threshold is the absolute bound. With Relative set, 0 means none.
	Threshold float64 `json:"threshold"`
	// Relative, when set, judges the canary against the baseline's value
	// of the same metric (see Relative.Worse); nil means absolute only.
	Relative *Relative `json:"relative,omitempty"`
	// ForSeconds (rollback only) is how long the rollback condition must
	// hold, every evaluation, before a rollback that is not severe; 0
	// means at once.
	ForSeconds int `json:"for_seconds,omitempty"`
}

// Absolute reports whether t has an absolute bound: always without
// Relative, else when Threshold is above 0.
func (t Threshold) Absolute() bool {
	return t.Relative == nil || t.Threshold > 0
}

// Relative is a bound relative to the baseline: the canary is worse when
// its value is above baseline + Margin and above baseline x Factor; a
// field left 0 is not checked, and at least one is set.
type Relative struct {
	Margin float64 `json:"margin,omitempty"`
	Factor float64 `json:"factor,omitempty"`
}

// Worse reports whether a canary value c is worse than the baseline's b
// by r: c > b + Margin (when Margin is set) and c > b x Factor (when
// Factor is set). A nil r is never worse.
func (r *Relative) Worse(c, b float64) bool {
	if r == nil || (r.Margin <= 0 && r.Factor <= 0) {
		return false
	}
	return (r.Margin <= 0 || c > b+r.Margin) && (r.Factor <= 0 || c > b*r.Factor)
}

// Sticky pins a client session to one target with an affinity cookie.
type Sticky struct {
	// Cookie is the cookie name, an RFC 6265 token.
	Cookie string `json:"cookie"`
	// TTLSeconds is the cookie's Max-Age in seconds, 1..2592000; 0 means 3600
	// (Defaults fills it in).
	TTLSeconds int `json:"ttl_s"`
}
