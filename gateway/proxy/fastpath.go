package proxy

import (
	"net/netip"

	"github.com/dwara/dwara/gateway/config"
)

// The fast path: a front may serve some exchanges on a faster path of its
// own (the loop front's inline exchange: routing, the pick, the
// bookkeeping and a small answer, all on its event loop), and it learns
// which services' requests may take it from one place: service.fastPath,
// decided once when a generation compiles, by fastPathRules. A front
// decides per request only what the request itself says (a body, Expect,
// an upgrade, HTTP/1.0).
//
// Every field of the spec that a service's requests meet (the service's
// own, and those of the upstreams its targets and mirror name) is
// declared in fastPathRules, with whether the fast path does what it
// asks: nil when every path does it alike (the route, the pick and the
// exchange's bookkeeping are shared), else a function that reports
// whether the field, as set, keeps the service off the fast path.
// TestFastPathRulesDeclareEveryField fails when a spec field is not
// declared, so a new per-request feature cannot be skipped silently by a
// fast path: its author has to say what the fast path does with it.

// fastPathRule is the declaration of one spec field (its path: JSON
// names, [] for a list's elements).
type fastPathRule struct {
	field string
	// off reports whether the field, as set for svc (with the upstreams
	// its targets and mirror name), keeps svc off the fast path; nil: it
	// never does.
	off func(svc *config.Service, ups []*config.Upstream) bool
}

// fastPathRules declares every spec field a request of a service meets.
var fastPathRules = []fastPathRule{
	// Routing and the pick: route, shared by every path.
	{field: "services[].name"},
	{field: "services[].base_path"},
	{field: "services[].host"},
	{field: "services[].upstream"},
	{field: "services[].split.targets[].upstream"},
	{field: "services[].split.targets[].weight"},
	{field: "services[].split.allocation"},
	{field: "services[].split.slots"},
	{field: "services[].sticky.cookie"},
	{field: "services[].sticky.ttl_s"},
	{field: "services[].override.header"},
	// The canary recorders: the exchange's bookkeeping (endRequest).
	{field: "services[].split.canary_analysis.enabled"},
	{field: "services[].split.canary_analysis.window_seconds"},
	{field: "services[].split.canary_analysis.step"},
	{field: "services[].split.canary_analysis.min_requests"},
	{field: "services[].split.canary_analysis.cooldown_seconds"},
	{field: "services[].split.canary_analysis.promote.metric"},
	{field: "services[].split.canary_analysis.promote.threshold"},
	{field: "services[].split.canary_analysis.rollback.metric"},
	{field: "services[].split.canary_analysis.rollback.threshold"},
	// Mirroring copies the request in the full path only.
	{field: "services[].mirror.upstream", off: mirrored},
	{field: "services[].mirror.percent", off: mirrored},
	{field: "services[].mirror.max_body_bytes", off: mirrored},
	// The upstreams: the balancer (route), health (the endpoint states
	// route reads), the pool's timeouts and dial checks (every path's
	// pools honour them).
	{field: "upstreams[].name"},
	{field: "upstreams[].balancer"},
	{field: "upstreams[].endpoints", off: func(_ *config.Service, ups []*config.Upstream) bool {
		// The fast path dials IP addresses over plain TCP itself: an
		// https:// endpoint or one named by DNS takes the full path.
		for _, u := range ups {
			for _, e := range u.Endpoints {
				if !plainIPEndpoint(e) {
					return true
				}
			}
		}
		return false
	}},
	{field: "upstreams[].health_check.path"},
	{field: "upstreams[].health_check.interval_s"},
	{field: "upstreams[].health_check.timeout_s"},
	{field: "upstreams[].health_check.healthy_threshold"},
	{field: "upstreams[].health_check.unhealthy_threshold"},
	{field: "upstreams[].health_check.expected_status.min"},
	{field: "upstreams[].health_check.expected_status.max"},
	{field: "upstreams[].passive.consecutive_failures"},
	{field: "upstreams[].passive.consecutive_5xx"},
	{field: "upstreams[].connect_timeout_ms"},
	{field: "upstreams[].response_header_timeout_ms"},
	{field: "upstreams[].idle_timeout_ms"},
	{field: "upstreams[].allow_link_local"},
}

// mirrored reports whether svc mirrors its requests.
func mirrored(svc *config.Service, _ []*config.Upstream) bool { return svc.Mirror != nil }

// fastPathOK reports whether the requests of s may take a front's fast
// path: no rule keeps it off, and the Proxy keeps no access log (whose
// lines only the full path writes).
func (p *Proxy) fastPathOK(s *config.Service, spec *config.Spec) bool {
	if p.access != nil {
		return false
	}
	var ups []*config.Upstream
	names := map[string]bool{}
	for _, tg := range s.Targets() {
		names[tg.Upstream] = true
	}
	if s.Mirror != nil {
		names[s.Mirror.Upstream] = true
	}
	for i := range spec.Upstreams {
		if names[spec.Upstreams[i].Name] {
			ups = append(ups, &spec.Upstreams[i])
		}
	}
	for _, r := range fastPathRules {
		if r.off != nil && r.off(s, ups) {
			return false
		}
	}
	return true
}

// plainIPEndpoint reports whether endpoint (host:port or http(s)://
// host:port) is plain http at an IP address.
func plainIPEndpoint(endpoint string) bool {
	u, err := config.ParseEndpoint(endpoint)
	if err != nil || u.Scheme != "http" {
		return false
	}
	_, err = netip.ParseAddrPort(u.Host)
	return err == nil
}
