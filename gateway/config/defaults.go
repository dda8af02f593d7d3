package config

// Default values that Defaults fills into zero fields.
const (
	DefaultBalancer = BalancerRoundRobin
	// DefaultConnectTimeoutMS, DefaultResponseHeaderTimeoutMS and
	// DefaultIdleTimeoutMS are the upstream timeouts.
	DefaultConnectTimeoutMS        = 5000
	DefaultResponseHeaderTimeoutMS = 60000
	DefaultIdleTimeoutMS           = 90000
	DefaultBasePath                = "/"
	DefaultStickyTTLSeconds        = 3600
	DefaultHealthPath              = "/healthz"
	DefaultHealthIntervalS         = 5
	DefaultHealthTimeoutS          = 2
	DefaultHealthyThreshold        = 2
	DefaultUnhealthyThreshold      = 2
	// DefaultExpectedStatusMin and DefaultExpectedStatusMax bound the
	// answers that pass a health check: 2xx and 3xx.
	DefaultExpectedStatusMin = 200
	DefaultExpectedStatusMax = 399
	DefaultCanaryWindowS     = 60
	DefaultCanaryStep        = 5
	DefaultCanaryMinRequests = 10
	DefaultCanaryCooldownS   = 30
	// DefaultMirrorMaxBodyBytes is a mirror's max_body_bytes when the
	// field is absent from the document (see Mirror.MaxBodyBytes).
	DefaultMirrorMaxBodyBytes = 65536
)

// DefaultPassiveConsecutiveFailures is how many transport failures in a row
// eject an endpoint when passive.consecutive_failures is 0 or the upstream
// has no passive block.
const DefaultPassiveConsecutiveFailures = 3

// Defaults fills zero values in place: an empty balancer becomes round_robin,
// zero upstream timeouts their defaults,
// an empty base path "/", a zero sticky TTL 3600 seconds, zero health-check
// fields, a zero passive.consecutive_failures (not consecutive_5xx, where 0
// means off) and zero canary-analysis timings their defaults (see the
// Default* constants). An absent passive block stays absent: the proxy
// applies the same defaults to it. Canary thresholds are left as given. A split target's default
// weight of 1 is applied when it is decoded, not here, because a weight of 0
// is meaningful.
//
// Defaults is idempotent. It mutates s, so it must not run concurrently with
// readers of s; a nil s is a no-op.
func (s *Spec) Defaults() {
	if s == nil {
		return
	}
	for i := range s.Upstreams {
		u := &s.Upstreams[i]
		if u.Balancer == "" {
			u.Balancer = DefaultBalancer
		}
		setDefault(&u.ConnectTimeoutMS, DefaultConnectTimeoutMS)
		setDefault(&u.ResponseHeaderTimeoutMS, DefaultResponseHeaderTimeoutMS)
		setDefault(&u.IdleTimeoutMS, DefaultIdleTimeoutMS)
		if hc := u.HealthCheck; hc != nil {
			setDefault(&hc.Path, DefaultHealthPath)
			setDefault(&hc.IntervalS, DefaultHealthIntervalS)
			setDefault(&hc.TimeoutS, DefaultHealthTimeoutS)
			setDefault(&hc.HealthyThreshold, DefaultHealthyThreshold)
			setDefault(&hc.UnhealthyThreshold, DefaultUnhealthyThreshold)
			setDefault(&hc.ExpectedStatus.Min, DefaultExpectedStatusMin)
			setDefault(&hc.ExpectedStatus.Max, DefaultExpectedStatusMax)
		}
		if pc := u.Passive; pc != nil {
			setDefault(&pc.ConsecutiveFailures, DefaultPassiveConsecutiveFailures)
		}
	}
	for i := range s.Services {
		svc := &s.Services[i]
		setDefault(&svc.BasePath, DefaultBasePath)
		if svc.Sticky != nil {
			setDefault(&svc.Sticky.TTLSeconds, DefaultStickyTTLSeconds)
		}
		if svc.Split != nil && svc.Split.CanaryAnalysis != nil {
			ca := svc.Split.CanaryAnalysis
			setDefault(&ca.WindowSeconds, DefaultCanaryWindowS)
			setDefault(&ca.Step, DefaultCanaryStep)
			setDefault(&ca.MinRequests, DefaultCanaryMinRequests)
			setDefault(&ca.CooldownSeconds, DefaultCanaryCooldownS)
		}
		for j := range svc.Models {
			if ca := svc.Models[j].CanaryAnalysis; ca != nil {
				setDefault(&ca.WindowSeconds, DefaultCanaryWindowS)
				setDefault(&ca.Step, DefaultCanaryStep)
				setDefault(&ca.MinRequests, DefaultCanaryMinRequests)
				setDefault(&ca.CooldownSeconds, DefaultCanaryCooldownS)
			}
		}
	}
}

func setDefault[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Clone returns a deep copy of s that shares no memory with it; nil slices
// stay nil and empty ones empty. Clone of nil is nil. It only reads s, so it
// is safe to call concurrently with other readers.
func (s *Spec) Clone() *Spec {
	if s == nil {
		return nil
	}
	c := &Spec{
		Upstreams: cloneSlice(s.Upstreams),
		Services:  cloneSlice(s.Services),
	}
	for i := range c.Upstreams {
		c.Upstreams[i] = c.Upstreams[i].Clone()
	}
	for i := range c.Services {
		c.Services[i] = c.Services[i].Clone()
	}
	return c
}

// Clone returns a deep copy of u that shares no memory with it (what
// Spec.Clone makes of each upstream).
func (u Upstream) Clone() Upstream {
	u.Endpoints = cloneSlice(u.Endpoints)
	u.HealthCheck = clonePtr(u.HealthCheck)
	u.Passive = clonePtr(u.Passive)
	return u
}

// Clone returns a deep copy of svc that shares no memory with it (what
// Spec.Clone makes of each service).
func (svc Service) Clone() Service {
	svc.Sticky = clonePtr(svc.Sticky)
	svc.Override = clonePtr(svc.Override)
	svc.Mirror = clonePtr(svc.Mirror)
	if svc.Models != nil {
		svc.Models = cloneSlice(svc.Models)
		for j := range svc.Models {
			m := &svc.Models[j]
			m.Targets = cloneSlice(m.Targets)
			m.CanaryAnalysis = cloneCanaryAnalysis(m.CanaryAnalysis)
		}
	}
	if svc.Cache != nil {
		c := *svc.Cache
		c.VaryHeaders = cloneSlice(c.VaryHeaders)
		svc.Cache = &c
	}
	if svc.Split != nil {
		sp := *svc.Split
		sp.Targets = cloneSlice(sp.Targets)
		sp.CanaryAnalysis = cloneCanaryAnalysis(sp.CanaryAnalysis)
		if sp.Match != nil {
			sp.Match = cloneSlice(sp.Match)
			for j := range sp.Match {
				sp.Match[j].Headers = cloneMatches(sp.Match[j].Headers)
				sp.Match[j].Cookies = cloneMatches(sp.Match[j].Cookies)
			}
		}
		if sp.Slots != nil {
			runs := make([][]int, len(sp.Slots))
			for i, r := range sp.Slots {
				runs[i] = cloneSlice(r)
			}
			sp.Slots = runs
		}
		svc.Split = &sp
	}
	return svc
}

// cloneCanaryAnalysis returns a deep copy of ca; nil for nil.
func cloneCanaryAnalysis(ca *CanaryAnalysis) *CanaryAnalysis {
	if ca == nil {
		return nil
	}
	c := *ca
	c.Steps = cloneSlice(ca.Steps)
	c.Webhooks = cloneSlice(ca.Webhooks)
	c.Promote.Relative = clonePtr(ca.Promote.Relative)
	c.Rollback.Relative = clonePtr(ca.Rollback.Relative)
	if lb := clonePtr(ca.LocalBrake); lb != nil {
		lb.Enabled = clonePtr(lb.Enabled)
		lb.AfterSeconds = clonePtr(lb.AfterSeconds)
		c.LocalBrake = lb
	}
	return &c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// Service returns the service with the given name and its index in
// s.Services, or nil and -1 when there is none (or s is nil). The pointer
// aliases s.Services, so writes through it change s.
func (s *Spec) Service(name string) (*Service, int) {
	if s == nil {
		return nil, -1
	}
	for i := range s.Services {
		if s.Services[i].Name == name {
			return &s.Services[i], i
		}
	}
	return nil, -1
}

// Upstream returns the upstream with the given name and its index in
// s.Upstreams, or nil and -1 when there is none (or s is nil). The pointer
// aliases s.Upstreams, so writes through it change s.
func (s *Spec) Upstream(name string) (*Upstream, int) {
	if s == nil {
		return nil, -1
	}
	for i := range s.Upstreams {
		if s.Upstreams[i].Name == name {
			return &s.Upstreams[i], i
		}
	}
	return nil, -1
}

// cloneMatches returns a deep copy of a rule's conditions.
func cloneMatches(m map[string]StringMatch) map[string]StringMatch {
	if m == nil {
		return nil
	}
	c := make(map[string]StringMatch, len(m))
	for k, v := range m {
		c[k] = StringMatch{Exact: clonePtr(v.Exact), Prefix: clonePtr(v.Prefix), Regex: clonePtr(v.Regex)}
	}
	return c
}
