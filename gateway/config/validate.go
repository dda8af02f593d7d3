package config

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/dwara/dwara/gateway/split"
)

// Limits enforced by Validate.
const (
	MaxEndpoints = 64
	// MaxServices, MaxUpstreams and MaxTotalEndpoints bound one
	// generation; a generation of 1,000 services over 8,000 upstreams of
	// 2 endpoints each fits well inside.
	MaxServices         = 10_000
	MaxUpstreams        = 20_000
	MaxTotalEndpoints   = 100_000
	MinTargets          = 2
	MaxTargets          = 8
	MaxWeight           = 1_000_000
	MaxStickyTTLSeconds = 2_592_000
	MaxCookieName       = 64
	MaxHealthS          = 3600
	MaxThreshold        = 100
	MaxWindowSeconds    = 3600
	MaxCooldownS        = 86_400
	MaxLatencyP99S      = 600
	// MaxConnectTimeoutMS, MaxResponseHeaderTimeoutMS and MaxIdleTimeoutMS
	// bound the upstream timeouts (one minute, one hour, one hour).
	MaxConnectTimeoutMS        = 60_000
	MaxResponseHeaderTimeoutMS = 3_600_000
	MaxIdleTimeoutMS           = 3_600_000
	// MaxMirrorBodyBytes bounds a mirror's max_body_bytes (10 MiB).
	MaxMirrorBodyBytes = 10 << 20
)

// namePattern is the pattern of upstream and service names.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

const nameRule = "must match [a-z0-9][a-z0-9._-]{0,62}: 1..63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"

var balancers = []string{BalancerRoundRobin, BalancerLeastConn, BalancerIPHash, BalancerPeakEWMA}

var metrics = []string{MetricErrorRate, MetricLatencyP99}

// modelMetrics are the metrics of a model alias's canary_analysis.
var modelMetrics = []string{MetricErrorRate, MetricLatencyP99, MetricTTFTP99}

// Validate checks the whole spec and returns nil or a *ValidationError that
// lists every problem, in the order met walking the spec top-down. It judges
// the spec as Defaults would leave it (an empty balancer is round_robin, and
// so on) without modifying s, so it is safe to call concurrently with other
// readers of s. A nil s is invalid.
func (s *Spec) Validate() error {
	if s == nil {
		return &ValidationError{Errors: []FieldError{{Message: "the spec is empty; expected an object with upstreams and services"}}}
	}
	c := s.Clone()
	c.Defaults()
	v := validator{spec: c}
	v.run()
	return v.probs.err()
}

type validator struct {
	spec  *Spec
	probs problems
	// upstreams maps each declared upstream name to its first index.
	upstreams map[string]int
}

func (v *validator) run() {
	if n := len(v.spec.Services); n > MaxServices {
		v.probs.add("services", "at most %d services, got %d", MaxServices, n)
		return
	}
	if n := len(v.spec.Upstreams); n > MaxUpstreams {
		v.probs.add("upstreams", "at most %d upstreams, got %d", MaxUpstreams, n)
		return
	}
	total := 0
	for _, u := range v.spec.Upstreams {
		total += len(u.Endpoints)
	}
	if total > MaxTotalEndpoints {
		v.probs.add("upstreams", "at most %d endpoints in all upstreams, got %d", MaxTotalEndpoints, total)
		return
	}
	v.upstreams = make(map[string]int, len(v.spec.Upstreams))
	for i := range v.spec.Upstreams {
		v.upstream(&v.spec.Upstreams[i], index("upstreams", i), i)
	}
	if len(v.spec.Services) == 0 {
		v.probs.add("services", "at least one service is required")
	}
	services := make(map[string]int, len(v.spec.Services))
	routes := make(map[string]int, len(v.spec.Services))
	for i := range v.spec.Services {
		svc := &v.spec.Services[i]
		path := index("services", i)
		v.name(svc.Name, path, i, "service", "services", services)
		v.route(svc, path, i, routes)
		v.service(svc, path)
	}
}

// name checks the name of element i of list (at path) and its uniqueness;
// seen maps the names met so far to their index.
func (v *validator) name(name, path string, i int, what, list string, seen map[string]int) {
	path = member(path, "name")
	if !namePattern.MatchString(name) {
		if name == "" {
			v.probs.add(path, "is required; %s", nameRule)
		} else {
			v.probs.add(path, "invalid %s name %s; %s", what, quote(name), nameRule)
		}
	}
	if j, dup := seen[name]; dup {
		v.probs.add(path, "duplicate %s name %s (also %s)", what, quote(name), index(list, j))
		return
	}
	seen[name] = i
}

func (v *validator) upstream(u *Upstream, path string, i int) {
	v.name(u.Name, path, i, "upstream", "upstreams", v.upstreams)
	if !slices.Contains(balancers, u.Balancer) {
		v.probs.add(member(path, "balancer"), "unknown balancer %s; allowed: %s", quote(u.Balancer), strings.Join(balancers, ", "))
	}
	eps := member(path, "endpoints")
	if n := len(u.Endpoints); n < 1 || n > MaxEndpoints {
		v.probs.add(eps, "must list 1..%d endpoints, got %d", MaxEndpoints, n)
	}
	seen := make(map[string]int, len(u.Endpoints))
	for i, ep := range u.Endpoints {
		p := index(eps, i)
		url, err := ParseEndpoint(ep)
		if err != nil {
			v.probs.add(p, "%v", err)
			continue
		}
		if a, err := netip.ParseAddr(url.Hostname()); err == nil {
			if err := CheckAddress(a, u.AllowLinkLocal); err != nil {
				v.probs.add(p, "endpoint %s: %v", quote(ep), err)
				continue
			}
		}
		key := url.String()
		if j, dup := seen[key]; dup {
			v.probs.add(p, "duplicate endpoint %s (also %s)", quote(ep), index(eps, j))
			continue
		}
		seen[key] = i
	}
	if hc := u.HealthCheck; hc != nil {
		v.healthCheck(hc, member(path, "health_check"))
	}
	if pc := u.Passive; pc != nil {
		pp := member(path, "passive")
		v.between(member(pp, "consecutive_failures"), pc.ConsecutiveFailures, 1, MaxThreshold)
		v.between(member(pp, "consecutive_5xx"), pc.Consecutive5xx, 0, MaxThreshold)
	}
	v.between(member(path, "connect_timeout_ms"), u.ConnectTimeoutMS, 1, MaxConnectTimeoutMS)
	v.between(member(path, "response_header_timeout_ms"), u.ResponseHeaderTimeoutMS, 1, MaxResponseHeaderTimeoutMS)
	v.between(member(path, "idle_timeout_ms"), u.IdleTimeoutMS, 1, MaxIdleTimeoutMS)
}

func (v *validator) healthCheck(hc *HealthCheck, path string) {
	if msg := checkHealthPath(hc.Path); msg != "" {
		v.probs.add(member(path, "path"), "%s", msg)
	}
	intervalOK := v.between(member(path, "interval_s"), hc.IntervalS, 1, MaxHealthS)
	if intervalOK {
		if hc.TimeoutS < 1 || hc.TimeoutS > hc.IntervalS {
			v.probs.add(member(path, "timeout_s"), "must be 1..interval_s (%d), got %d", hc.IntervalS, hc.TimeoutS)
		}
	} else {
		v.between(member(path, "timeout_s"), hc.TimeoutS, 1, MaxHealthS)
	}
	v.between(member(path, "healthy_threshold"), hc.HealthyThreshold, 1, MaxThreshold)
	v.between(member(path, "unhealthy_threshold"), hc.UnhealthyThreshold, 1, MaxThreshold)
	es := member(path, "expected_status")
	minOK := v.between(member(es, "min"), hc.ExpectedStatus.Min, 100, 599)
	maxOK := v.between(member(es, "max"), hc.ExpectedStatus.Max, 100, 599)
	if minOK && maxOK && hc.ExpectedStatus.Min > hc.ExpectedStatus.Max {
		v.probs.add(es, "min (%d) must not be above max (%d)", hc.ExpectedStatus.Min, hc.ExpectedStatus.Max)
	}
}

// checkHealthPath returns what is wrong with a health-check request path, or
// "".
func checkHealthPath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("must start with \"/\", got %s", quote(p))
	case strings.ContainsRune(p, '#'):
		return "must not contain a fragment (\"#\")"
	case strings.ContainsFunc(p, isSpaceOrControl):
		return "must not contain spaces or control characters"
	}
	return ""
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// between reports whether lo <= n <= hi, recording a problem when not.
func (v *validator) between(path string, n, lo, hi int) bool {
	if n < lo || n > hi {
		v.probs.add(path, "must be %d..%d, got %d", lo, hi, n)
		return false
	}
	return true
}

// route checks base_path and host, and that no earlier service has the same
// (host, base_path); routes maps each route seen so far to its service index.
func (v *validator) route(svc *Service, path string, i int, routes map[string]int) {
	if msg := checkBasePath(svc.BasePath); msg != "" {
		v.probs.add(member(path, "base_path"), "%s", msg)
	}
	if svc.Host != "" {
		if msg := checkHost(svc.Host); msg != "" {
			v.probs.add(member(path, "host"), "%s", msg)
		}
	}
	key := svc.Host + "\x00" + svc.BasePath
	if j, dup := routes[key]; dup {
		v.probs.add(member(path, "base_path"), "host %s and base_path %s are already routed by services[%d]", quote(svc.Host), quote(svc.BasePath), j)
		return
	}
	routes[key] = i
}

// checkBasePath returns what is wrong with a base path, or "".
func checkBasePath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("must start with \"/\", got %s", quote(p))
	case strings.ContainsAny(p, "?#"):
		return "must not contain \"?\" or \"#\"; it is a path prefix, not a URL"
	case strings.ContainsFunc(p, isSpaceOrControl):
		return "must not contain spaces or control characters"
	case p == "/":
		return ""
	case strings.HasSuffix(p, "/"):
		return fmt.Sprintf("must not end with \"/\" (write %s); it matches on path-segment boundaries", quote(strings.TrimRight(p, "/")))
	}
	for seg := range strings.SplitSeq(p[1:], "/") {
		switch seg {
		case "":
			return "must not contain \"//\""
		case ".", "..":
			return "must not contain \".\" or \"..\" segments"
		}
	}
	return ""
}

// checkHost returns what is wrong with a service host, or "".
func checkHost(h string) string {
	lower := strings.ToLower(h)
	if lower != h {
		if checkHost(lower) == "" {
			return fmt.Sprintf("must be lowercase (%s)", quote(lower))
		}
		h = lower
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		switch {
		case addr.Zone() != "":
			return "must not carry an IPv6 zone"
		case addr.String() != h:
			return fmt.Sprintf("must be written in canonical form %s", quote(addr.String()))
		}
		return ""
	}
	if strings.HasPrefix(h, "[") {
		return "must be an IP address without brackets or port"
	}
	if _, port, err := net.SplitHostPort(h); err == nil && isDigits(port) {
		return "must not include a port"
	}
	if !isDNSName(h) {
		return fmt.Sprintf("must be a DNS name (lowercase letters, digits, '-' and '.') or an IP address, got %s", quote(h))
	}
	return ""
}

// isDNSName reports whether h is a lowercase DNS name: dot-separated labels
// of 1..63 letters, digits and inner hyphens, at most 253 bytes in all, no
// trailing dot, and a last label that is not all digits (which would make it
// a mistyped IPv4 address rather than a name).
func isDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	// A last label of digits, or 0x and hex digits, is an IPv4 address in
	// a form some resolvers accept (2852039166, 0xa9fea9fe, 0177.0.0.1).
	if last := h[strings.LastIndexByte(h, '.')+1:]; isDigits(last) || isHexNumber(last) {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

// isHexNumber reports whether s is 0x followed by hex digits.
func isHexNumber(s string) bool {
	rest, ok := strings.CutPrefix(s, "0x")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// reservedOverrideHeaders are the fields an override may not use: the
// gateway sets them, or the connection and the routing need them.
var reservedOverrideHeaders = []string{"host", "cookie", "connection", "content-length", "transfer-encoding",
	"te", "trailer", "upgrade", "keep-alive", "proxy-connection", "x-request-id", "x-forwarded-for",
	"x-forwarded-host", "x-forwarded-proto", "x-dwara-service", "x-dwara-upstream", "x-dwara-generation"}

// override checks a service's override header.
func (v *validator) override(ov *Override, path string) {
	h := member(path, "header")
	switch {
	case ov.Header == "":
		v.probs.add(h, "is required: the request header that names the target, e.g. X-Dwara-Branch")
	case len(ov.Header) > 64 || !isToken(ov.Header):
		v.probs.add(h, "must be an HTTP field name (a token of at most 64 characters), got %s", quote(ov.Header))
	case slices.Contains(reservedOverrideHeaders, strings.ToLower(ov.Header)):
		v.probs.add(h, "%s is a field the gateway sets or the connection needs; choose another, e.g. X-Dwara-Branch", quote(ov.Header))
	}
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

func (v *validator) service(svc *Service, path string) {
	switch {
	case svc.Upstream != "" && svc.Split != nil:
		v.probs.add(path, "set exactly one of upstream or split, not both")
	case svc.Upstream == "" && svc.Split == nil:
		v.probs.add(path, "one of upstream or split is required")
	case svc.Upstream != "":
		v.ref(svc.Upstream, member(path, "upstream"))
	}
	if svc.Split != nil {
		v.split(svc.Split, member(path, "split"))
	}
	if ov := svc.Override; ov != nil {
		v.override(ov, member(path, "override"))
	}
	if svc.Sticky != nil {
		v.sticky(svc.Sticky, member(path, "sticky"))
	}
	if m := svc.Mirror; m != nil {
		v.mirror(m, svc, member(path, "mirror"))
	}
	v.models(svc, path)
	if c := svc.Cache; c != nil {
		v.cache(c, member(path, "cache"))
	}
}

// mirror checks a service's mirror: a declared upstream that is not one of
// the service's own targets (whose endpoints would then get real and
// mirrored copies of the same requests), a percent in (0, 100] in steps of
// 0.01, and a body cap in 0..MaxMirrorBodyBytes.
func (v *validator) mirror(m *Mirror, svc *Service, path string) {
	up := member(path, "upstream")
	v.ref(m.Upstream, up)
	if m.Upstream != "" && slices.ContainsFunc(svc.Targets(), func(t Target) bool { return t.Upstream == m.Upstream }) {
		v.probs.add(up, "upstream %s is a target of this service; mirror to an upstream that does not serve its real requests", quote(m.Upstream))
	}
	// Written so that NaN fails too.
	if p := m.Percent; !(p > 0 && p <= 100) {
		v.probs.add(member(path, "percent"), "must be in (0, 100], got %g", p)
	} else if c := p * 100; math.Abs(c-math.Round(c)) > 1e-6 {
		v.probs.add(member(path, "percent"), "must be a multiple of 0.01, got %g", p)
	}
	v.between(member(path, "max_body_bytes"), m.MaxBodyBytes, 0, MaxMirrorBodyBytes)
}

// ref checks that name is a declared upstream.
func (v *validator) ref(name, path string) {
	if name == "" {
		v.probs.add(path, "is required; name a declared upstream")
		return
	}
	if _, ok := v.upstreams[name]; ok {
		return
	}
	msg := "unknown upstream " + quote(name)
	if len(v.upstreams) == 0 {
		msg += "; no upstreams are declared"
	} else if near := v.closest(name); near != "" {
		msg += fmt.Sprintf("; did you mean %s?", quote(near))
	}
	v.probs.add(path, "%s", msg)
}

// closest returns the first declared upstream within edit distance 2 of
// name (the nearest one if several are), or "".
func (v *validator) closest(name string) string {
	names := make([]string, len(v.spec.Upstreams))
	for i, u := range v.spec.Upstreams {
		names[i] = u.Name
	}
	return Nearest(name, names)
}

// editDistance returns the Levenshtein distance of a and b, or limit when it
// is at least limit. The length check keeps a huge operator-supplied name
// from costing quadratic time.
func editDistance(a, b string, limit int) int {
	if abs(len(a)-len(b)) >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func (v *validator) split(sp *Split, path string) {
	tp := member(path, "targets")
	n := len(sp.Targets)
	if n < MinTargets || n > MaxTargets {
		v.probs.add(tp, "must list %d..%d targets, got %d", MinTargets, MaxTargets, n)
	}
	seen := make(map[string]int, n)
	total, weightsOK := 0, true
	for i, t := range sp.Targets {
		p := index(tp, i)
		v.ref(t.Upstream, member(p, "upstream"))
		if j, dup := seen[t.Upstream]; dup && t.Upstream != "" {
			v.probs.add(member(p, "upstream"), "upstream %s is already a target (also %s)", quote(t.Upstream), index(tp, j))
		} else if !dup {
			seen[t.Upstream] = i
		}
		if t.Weight < 0 || t.Weight > MaxWeight {
			v.probs.add(member(p, "weight"), "must be 0..%d, got %d", MaxWeight, t.Weight)
			weightsOK = false
			continue
		}
		total += t.Weight // at most MaxTargets*MaxWeight when weightsOK
	}
	if n > 0 && weightsOK && n <= MaxTargets && (total < 1 || total > MaxWeight) {
		v.probs.add(tp, "total weight must be 1..%d, got %d", MaxWeight, total)
		weightsOK = false
	}
	v.allocation(sp, path, n, weightsOK)
	if len(sp.Match) > 0 {
		v.match(sp, member(path, "match"))
	}
	if sp.ManagedBy != "" && !namePattern.MatchString(sp.ManagedBy) {
		v.probs.add(member(path, "managed_by"), "invalid manager %s; %s (e.g. argo-rollouts)", quote(sp.ManagedBy), nameRule)
	}
	if sp.CanaryAnalysis != nil {
		if !weightsOK || n > MaxTargets {
			total = 0 // unknown: the weights are invalid
		}
		v.canary(sp.CanaryAnalysis, member(path, "canary_analysis"), n, total)
	}
}

var allocations = []string{AllocationHash, AllocationStable}

// allocation checks a split's allocation and, when present, its slot table
// (n targets; weightsOK when the weights are valid, so the counts can be
// checked).
func (v *validator) allocation(sp *Split, path string, n int, weightsOK bool) {
	ap := member(path, "allocation")
	if sp.Allocation != "" && !slices.Contains(allocations, sp.Allocation) {
		v.probs.add(ap, "unknown allocation %s; allowed: %s", quote(sp.Allocation), strings.Join(allocations, ", "))
		return
	}
	if sp.Stable() && sp.CanaryAnalysis != nil {
		v.probs.add(ap, "stable allocation cannot be combined with canary_analysis (the canary controller sets hash-allocated weights); use allocation hash")
	}
	if sp.Slots == nil {
		return
	}
	sl := member(path, "slots")
	if !sp.Stable() {
		v.probs.add(sl, "only a split with allocation stable has a slot table; remove slots")
		return
	}
	if n < MinTargets || n > MaxTargets {
		return
	}
	table, err := DecodeSlots(sp.Slots, n)
	if err != nil {
		v.probs.add(sl, "%v", err)
		return
	}
	if !weightsOK {
		return
	}
	w := splitWeights(sp.Targets)
	want := split.Counts(w)
	var got [MaxTargets]int
	for _, o := range table {
		got[o]++
	}
	for i, c := range want {
		if got[i] != c {
			v.probs.add(sl, "target %d (%s) owns %d slots, want %d: round(%d * weight / total weight) by largest remainder; leave slots out and the API computes them",
				i, sp.Targets[i].Upstream, got[i], c, split.Slots)
			return
		}
	}
}

// canary checks canary analysis for a split of n targets with the given
// total weight (0 when the weights are invalid and the total is unknown).
func (v *validator) canary(ca *CanaryAnalysis, path string, n, total int) {
	v.canaryOf(ca, path, n, total, metrics)
}

// canaryOf is canary with the metrics allowed (a split's, or a model
// alias's).
func (v *validator) canaryOf(ca *CanaryAnalysis, path string, n, total int, allowed []string) {
	if n != 2 {
		v.probs.add(path, "needs exactly 2 targets (baseline, canary), got %d", n)
	}
	v.between(member(path, "window_seconds"), ca.WindowSeconds, 1, MaxWindowSeconds)
	switch {
	case ca.Steps != nil:
		// steps replaces step (checked there).
	case total > 0:
		if ca.Step < 1 || ca.Step > total {
			v.probs.add(member(path, "step"), "must be 1..%d (the total weight), got %d", total, ca.Step)
		}
	case ca.Step < 1:
		v.probs.add(member(path, "step"), "must be at least 1, got %d", ca.Step)
	}
	if ca.MinRequests < 1 {
		v.probs.add(member(path, "min_requests"), "must be at least 1, got %d", ca.MinRequests)
	}
	v.between(member(path, "cooldown_seconds"), ca.CooldownSeconds, 0, MaxCooldownS)
	v.steps(ca, path, total)
	v.webhooks(ca.Webhooks, path)
	v.between(member(path, "hold_seconds"), ca.HoldSeconds, 0, MaxCooldownS)
	v.localBrake(ca.LocalBrake, member(path, "local_brake"))
	if ca.Gate != "" && !slices.Contains(gates, ca.Gate) {
		v.probs.add(member(path, "gate"), "unknown gate %s; allowed: %s", quote(ca.Gate), strings.Join(gates, ", "))
	}
	promoteOK := v.threshold(ca.Promote, member(path, "promote"), allowed)
	rollbackOK := v.threshold(ca.Rollback, member(path, "rollback"), allowed)
	if ca.Promote.ForSeconds != 0 {
		v.probs.add(member(path, "promote.for_seconds"), "is for rollback only; a promotion waits with hold_seconds")
	}
	v.between(member(path, "rollback.for_seconds"), ca.Rollback.ForSeconds, 0, MaxCooldownS)
	if mc := ca.MinConfidence; mc != 0 {
		switch {
		case !(mc > 0 && mc < 1):
			v.probs.add(member(path, "min_confidence"), "must be in (0, 1), e.g. 0.95 (a rollback then needs p < 0.05), got %g", mc)
		case ca.Rollback.Metric != MetricErrorRate:
			v.probs.add(member(path, "min_confidence"), "needs rollback.metric error_rate: the p-value compares error rates")
		}
	}
	if promoteOK && rollbackOK && ca.Promote.Metric == ca.Rollback.Metric && ca.Promote.Absolute() && ca.Rollback.Absolute() &&
		ca.Promote.Threshold >= ca.Rollback.Threshold {
		v.probs.add(member(path, "promote.threshold"), "must be below rollback.threshold (%g) when both use %s, got %g",
			ca.Rollback.Threshold, ca.Promote.Metric, ca.Promote.Threshold)
	}
}

var gates = []string{GateAuto, GateManual, GateFinal}

// localBrake checks canary_analysis.local_brake at path: after_seconds
// 1..MaxLocalBrakeAfterS, and none beside enabled: false (it would do
// nothing).
func (v *validator) localBrake(lb *LocalBrake, path string) {
	if lb == nil {
		return
	}
	off := lb.Enabled != nil && !*lb.Enabled
	switch {
	case lb.AfterSeconds == nil:
	case off:
		v.probs.add(member(path, "after_seconds"), "does nothing with enabled: false; leave it out, or set enabled: true")
	case *lb.AfterSeconds < 1 || *lb.AfterSeconds > MaxLocalBrakeAfterS:
		v.probs.add(member(path, "after_seconds"), "must be 1..%d seconds without word from the canary runner (default %d); to turn the brake off, set enabled: false, got %d",
			MaxLocalBrakeAfterS, DefaultLocalBrakeAfterS, *lb.AfterSeconds)
	}
}

// MaxCanarySteps is the most entries canary_analysis.steps may have.
const MaxCanarySteps = 20

// steps checks the schedule of ca (total is the split's total weight, 0
// when unknown): 1..MaxCanarySteps shares in percent, strictly increasing
// within 1..100, ending at 100, each a distinct weight of the total, and
// no step beside it.
func (v *validator) steps(ca *CanaryAnalysis, path string, total int) {
	if ca.Steps == nil {
		return
	}
	sp := member(path, "steps")
	if len(ca.Steps) == 0 || len(ca.Steps) > MaxCanarySteps {
		v.probs.add(sp, "must list 1..%d shares in percent, got %d", MaxCanarySteps, len(ca.Steps))
		return
	}
	if ca.Step != 0 && ca.Step != DefaultCanaryStep {
		v.probs.add(member(path, "step"), "steps replaces step; leave step out")
	}
	prev, prevWeight := 0, 0
	for i, pc := range ca.Steps {
		ip := fmt.Sprintf("%s[%d]", sp, i)
		switch {
		case pc < 1 || pc > 100:
			v.probs.add(ip, "must be a share in percent, 1..100, got %d", pc)
			return
		case pc <= prev:
			v.probs.add(ip, "must be above the step before it (%d): steps are strictly increasing, got %d", prev, pc)
			return
		}
		if total > 0 {
			w := StepWeight(total, pc)
			if w <= prevWeight {
				v.probs.add(ip, "%d%% of the total weight %d is weight %d, no more than the step before it: use a larger total or fewer steps", pc, total, w)
				return
			}
			prevWeight = w
		}
		prev = pc
	}
	if prev != 100 {
		v.probs.add(fmt.Sprintf("%s[%d]", sp, len(ca.Steps)-1), "the last step must be 100 (the canary at the whole total), got %d", prev)
	}
}

// threshold checks one promote or rollback bound and reports whether it is
// valid.
func (v *validator) threshold(t Threshold, path string, allowed []string) bool {
	if !slices.Contains(allowed, t.Metric) {
		switch {
		case t.Metric == "":
			v.probs.add(member(path, "metric"), "is required; allowed: %s", strings.Join(allowed, ", "))
		case t.Metric == MetricTTFTP99:
			v.probs.add(member(path, "metric"), "ttft_p99 (time to the first streamed token) is a metric of a model alias's canary_analysis only; a split's allowed: %s", strings.Join(allowed, ", "))
		default:
			v.probs.add(member(path, "metric"), "unknown metric %s; allowed: %s", quote(t.Metric), strings.Join(allowed, ", "))
		}
		return false
	}
	// ttft_p99 is bounded as latency_p99 (seconds).
	lat := t.Metric == MetricLatencyP99 || t.Metric == MetricTTFTP99
	x := t.Threshold
	ok := true
	switch {
	case t.Metric == MetricErrorRate && !(x >= 0 && x <= 1): // written so that NaN fails too
		v.probs.add(member(path, "threshold"), "must be in [0, 1] for error_rate (a fraction of requests), got %g", x)
		ok = false
	case lat && t.Relative != nil && !(x >= 0 && x <= MaxLatencyP99S):
		v.probs.add(member(path, "threshold"), "must be in [0, %d] for %s (seconds; 0: none, beside relative), got %g", MaxLatencyP99S, t.Metric, x)
		ok = false
	case lat && t.Relative == nil && !(x > 0 && x <= MaxLatencyP99S):
		v.probs.add(member(path, "threshold"), "must be in (0, %d] for %s (seconds), got %g", MaxLatencyP99S, t.Metric, x)
		ok = false
	}
	if r := t.Relative; r != nil {
		rp := member(path, "relative")
		maxMargin := 1.0
		if lat {
			maxMargin = MaxLatencyP99S
		}
		switch {
		case !(r.Margin >= 0 && r.Margin <= maxMargin):
			v.probs.add(member(rp, "margin"), "must be in [0, %g] (%s, added to the baseline's), got %g", maxMargin, t.Metric, r.Margin)
			ok = false
		case !(r.Factor == 0 || (r.Factor >= 1 && r.Factor <= MaxRelativeFactor)):
			v.probs.add(member(rp, "factor"), "must be in [1, %d] (times the baseline's %s), got %g", MaxRelativeFactor, t.Metric, r.Factor)
			ok = false
		case r.Margin == 0 && r.Factor == 0:
			v.probs.add(rp, "needs margin, factor or both above 0")
			ok = false
		}
	}
	return ok
}

// MaxRelativeFactor is the largest relative.factor of a threshold.
const MaxRelativeFactor = 1000

func (v *validator) sticky(st *Sticky, path string) {
	if !isCookieToken(st.Cookie) {
		v.probs.add(member(path, "cookie"), "must be an RFC 6265 token of 1..%d characters without control characters, spaces or separators ()<>@,;:\\\"/[]?={}, got %s",
			MaxCookieName, quote(st.Cookie))
	}
	v.between(member(path, "ttl_s"), st.TTLSeconds, 1, MaxStickyTTLSeconds)
}

// isCookieToken reports whether s is a cookie name: an RFC 6265 token (RFC
// 2616 token: visible US-ASCII except separators) of 1..MaxCookieName bytes.
func isCookieToken(s string) bool {
	if s == "" || len(s) > MaxCookieName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}
