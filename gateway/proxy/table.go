package proxy

import (
	"errors"
	"fmt"
	"maps"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/balance"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/match"
	"github.com/dwara/dwara/gateway/split"
)

// Table is one compiled generation: everything a request needs, resolved at
// compile time. It is immutable once published through Proxy.table.
type Table struct {
	generation int64
	// byHost holds the services with a Host, hostless the others; both are
	// sorted by base path length, longest first.
	byHost   map[string][]*service
	hostless []*service
	// upstreams by name, for Retain and introspection; upstreamOrder in
	// the order of the spec (upstreamAt).
	upstreams     map[string]*upstream
	upstreamOrder []*upstream
	// canaries are the services with canary analysis, in spec order.
	canaries []*service
	// modelCanaries are the model aliases with canary analysis, in spec
	// order (groups "<service>/<alias>").
	modelCanaries []*modelAlias
	// caches are the services' response caches, by service name.
	caches map[string]*serviceCache
	// specOrder are the services in the order of the spec (the next
	// generation looks a service up at its place first, serviceAt);
	// byName indexes them by name, made by the first lookup that needs
	// it. Read and written under applyMu.
	specOrder []*service
	byName    map[string]*service
	// dropped are the services of the table served before this one that
	// it did not carry over (compiled anew, or gone): the (service,
	// upstream) pairs whose series it may no longer have are theirs. Set
	// with changed; cleared by retainTargetMetrics, so that it does not
	// keep them.
	dropped []*service
	// peers are the upstreams naming each endpoint address (linkPeers);
	// the next table may take the map over and change it. Read and
	// written under applyMu only.
	peers map[string][]*upstream
	// changed is what of the upstreams differs from the table served
	// before this one; set by compile, read by Apply's bookkeeping.
	changed *upstreamChanges
}

// upstreamChanges are the compiled upstreams one table has and the table
// served before it has not (fresh: compiled anew), and the other way round
// (gone). nil when there was no table before.
type upstreamChanges struct {
	fresh, gone []*upstream
}

// service is a compiled config.Service. A service routed to one upstream is a
// split with one target of weight 1.
type service struct {
	name     string
	basePath string
	// split is the service's weighted split: the generation's, until the
	// canary controller swaps in transient weights (SetCanaryWeight).
	split   atomic.Pointer[split.Split]
	targets []*Target
	sticky  *sticky
	// canary is the service's canary group; nil without canary_analysis.
	canary *canaryGroup
	// override is the canonical name of the header that forces a target;
	// "" when the service has none.
	override string
	// branches lists the targets' upstream names, for the 400 of an
	// unknown forced branch.
	branches string
	// rules are the split's match rules, checked before the pick; nil
	// without any. matched[i] counts the requests rule i served.
	rules   *match.Rules
	matched []prometheus.Counter
	// models are the service's model aliases (models.go); nil without
	// any.
	models *modelRoutes
	// cfg is the service's configuration, a copy of its own (shared by
	// the services carried over from this one, never written): the next
	// generation carries the compiled service over when its configuration
	// is the same (carrySlab.carry). Set only when carryable.
	cfg       *config.Service
	carryable bool
}

// canaryGroup is a compiled canary group: a 2-target split with canary
// analysis. Its recorders are in the targets (baseline first).
type canaryGroup struct {
	total int
	// weight is the canary weight in force, for dwara_canary_weight.
	weight prometheus.Gauge
}

type sticky struct {
	cookie string
	// attrs is everything after the value in Set-Cookie, without Secure.
	attrs string
}

// mint makes a new session: its Set-Cookie value (with Secure over TLS)
// and, inside that same string, the handle, both over *buf, which it
// reuses (a Request's, kept from request to request): no allocation once
// the buffer has grown to the cookie's size. The strings are valid until
// the next mint into *buf; whoever keeps either beyond its request copies
// it (the net/http front's header map does).
func (st *sticky) mint(tls bool, buf *[]byte) (setCookie, handle string) {
	const secure = "; Secure"
	var h [affinity.IDLen]byte
	affinity.MintInto(&h)
	b := append((*buf)[:0], st.cookie...)
	b = append(b, '=')
	b = append(b, h[:]...)
	b = append(b, st.attrs...)
	if tls {
		b = append(b, secure...)
	}
	*buf = b
	setCookie = unsafe.String(unsafe.SliceData(b), len(b))
	at := len(st.cookie) + 1
	return setCookie, setCookie[at : at+len(h)]
}

// Target is a compiled config.Target: one weighted upstream of a service,
// with its metric children resolved.
type Target struct {
	Up *upstream
	*targetMetrics
	// rec records the target's answers for the canary analysis; nil when
	// the service has none.
	rec *canary.Recorder
	// headers is the X-Dwara-* set sent upstream, values with len == cap so
	// an append elsewhere never writes into the shared arrays.
	HdrService, HdrUpstream, HdrGeneration []string
	// Mirror is the service's mirror (mirror.go), shared by its targets;
	// nil when it has none.
	Mirror *mirror
	// model is the alias target's model and metrics (models.go); nil for
	// a target of a split.
	model *modelTarget
	// cache is the service's response cache (cache.go); nil when it has
	// none.
	cache *targetCache
}

// upstream is a compiled config.Upstream: its balancer over its endpoints.
type upstream struct {
	name      string
	balancer  balance.Balancer
	endpoints []*Endpoint
	// passive is the upstream's passive-check settings, with the defaults
	// filled in.
	passive passiveSettings
	// shared is the upstream's retry budget and counters, kept across
	// generations.
	shared *upstreamShared
	// cfg is the upstream's configuration, a copy of its own: the next
	// generation keeps the compiled upstream (endpoints, pools, balancer)
	// when its configuration is the same.
	cfg config.Upstream
	// goneAt is the compile (Proxy.compiles) whose table replaced or
	// dropped this upstream; read and written under applyMu only.
	goneAt int64
}

// Endpoint is one upstream endpoint with its connection pool.
type Endpoint struct {
	Addr  string
	state *balance.State
	// index is the endpoint's position in its upstream's endpoints (the
	// bit of a request's tried set; an upstream has at most 64).
	index int
	// peers are the upstreams of the generation that name this endpoint's
	// address (its own among them): they share its state, so the cap on
	// passive ejections is kept in each.
	peers []*upstream
	// Pool carries every request to the endpoint, over TLS for an https
	// one.
	Pool *connPool
	// HostHeader is the Host sent upstream: the endpoint's host:port.
	HostHeader string
	// poolKey is Pool's key in the proxy's pools.
	poolKey string
}

// compile turns a spec into a table. It does not validate spec (Apply's
// caller did), but it refuses with an error, never a panic, whatever it cannot
// compile: a nil spec, a bad endpoint or balancer, a service naming an
// unknown upstream, or weights split.New refuses.
func (p *Proxy) compile(spec *config.Spec, generation int64) (_ *Table, err error) {
	if spec == nil {
		return nil, errors.New("compile generation: nil spec")
	}
	// The upstreams whose shared state (and series) this compile creates:
	// forgotten again if it fails, with the pools it made for them (their
	// protocol watches count in that state).
	var created []string
	defer func() {
		if err != nil {
			p.forgetUpstreams(created)
			p.m.retainAll = true
		}
	}()
	t := &Table{
		generation:    generation,
		byHost:        make(map[string][]*service),
		upstreams:     make(map[string]*upstream, len(spec.Upstreams)),
		upstreamOrder: make([]*upstream, 0, len(spec.Upstreams)),
	}
	// The generation served: what its configuration has not changed is
	// carried over rather than compiled again. Nothing of it is written
	// (requests still read it) but under the locks its readers take.
	prev := p.table.Load()
	if p.closed {
		prev = nil
	}
	p.compiles++
	p.reserve(spec)
	var ch upstreamChanges
	named := 0 // upstreams of prev that spec names
	for i := range spec.Upstreams {
		u := &spec.Upstreams[i]
		pu := prev.upstreamAt(i, u.Name)
		if pu != nil {
			named++
			if upstreamEqual(&pu.cfg, u) {
				t.upstreams[u.Name] = pu
				t.upstreamOrder = append(t.upstreamOrder, pu)
				continue
			}
			ch.gone = append(ch.gone, pu)
		}
		if p.shared[u.Name] == nil {
			created = append(created, u.Name)
		}
		cu, err := p.compileUpstream(*u)
		if err != nil {
			return nil, err
		}
		t.upstreams[u.Name] = cu
		t.upstreamOrder = append(t.upstreamOrder, cu)
		ch.fresh = append(ch.fresh, cu)
	}
	if prev != nil {
		if named < len(prev.upstreams) {
			for name, pu := range prev.upstreams {
				if t.upstreams[name] == nil {
					ch.gone = append(ch.gone, pu)
				}
			}
		}
		for _, pu := range ch.gone {
			pu.goneAt = p.compiles
		}
		t.changed = &ch
	}
	gen := strconv.FormatInt(generation, 10)
	hdrGen := oneValue(gen)
	var slab carrySlab
	t.specOrder = make([]*service, 0, len(spec.Services))
	found := 0 // services of prev that spec names
	for i := range spec.Services {
		s := &spec.Services[i]
		if ps := prev.serviceAt(i, s.Name); ps != nil {
			found++
			if ps.carryable && carryable(s) && serviceEqual(ps.cfg, s) {
				if cs := slab.carry(ps, p.compiles, hdrGen, len(spec.Services)); cs != nil {
					t.add(s.Host, cs)
					continue
				}
			}
			t.dropped = append(t.dropped, ps)
		}
		cs := &service{name: s.Name, basePath: s.BasePath}
		if cs.basePath == "" {
			cs.basePath = "/"
		}
		targets := s.Targets()
		weights := make([]int, len(targets))
		for i, tg := range targets {
			u, ok := t.upstreams[tg.Upstream]
			if !ok {
				return nil, fmt.Errorf("service %q: unknown upstream %q", s.Name, tg.Upstream)
			}
			weights[i] = tg.Weight
			cs.targets = append(cs.targets, p.newTarget(s.Name, u, hdrGen))
		}
		var sp *split.Split
		var err error
		if s.Split.Stable() {
			// The generation's slot table (a fresh one when the spec
			// carries none, as a hand-written spec file may not).
			sp, err = split.NewStable(weights, s.Split.Table())
		} else {
			sp, err = split.New(weights)
		}
		if err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		cs.split.Store(sp)
		if cs.rules, err = match.Compile(s.Split); err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		for i := range cs.rules.Len() {
			name, ti := cs.rules.Rule(i)
			cs.matched = append(cs.matched, p.matchCounter(s.Name, name, cs.targets[ti].Up.name))
		}
		if s.Split != nil && s.Split.CanaryAnalysis != nil && len(cs.targets) == 2 {
			cs.canary = &canaryGroup{total: weights[0] + weights[1], weight: p.m.canaryWeight.WithLabelValues(s.Name)}
			cs.canary.weight.Set(float64(weights[1]))
			for _, tg := range cs.targets {
				tg.rec = canary.NewRecorder()
			}
			t.canaries = append(t.canaries, cs)
		}
		if s.Sticky != nil {
			ttl := s.Sticky.TTLSeconds
			if ttl == 0 {
				ttl = config.DefaultStickyTTLSeconds
			}
			cs.sticky = &sticky{
				cookie: s.Sticky.Cookie,
				attrs:  "; Max-Age=" + strconv.Itoa(ttl) + "; Path=/; HttpOnly; SameSite=Lax",
			}
		}
		if s.Override != nil {
			cs.override = textproto.CanonicalMIMEHeaderKey(s.Override.Header)
			names := make([]string, len(cs.targets))
			for i, tg := range cs.targets {
				names[i] = tg.Up.name
			}
			cs.branches = strings.Join(names, ", ")
		}
		if s.Mirror != nil {
			m, err := p.compileMirror(*s, t)
			if err != nil {
				return nil, fmt.Errorf("service %q: %w", s.Name, err)
			}
			for _, tg := range cs.targets {
				tg.Mirror = m
			}
		}
		if err := p.compileModels(*s, cs, t, gen); err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		if cs.models != nil && len(cs.targets) > 0 {
			for _, a := range cs.models.aliases {
				for _, tg := range a.targets {
					tg.Mirror = cs.targets[0].Mirror
				}
			}
		}
		if err := p.compileCache(*s, cs, t); err != nil {
			return nil, fmt.Errorf("service %q: %w", s.Name, err)
		}
		if carryable(s) {
			cs.cfg, cs.carryable = cloneService(s), true
		}
		t.add(s.Host, cs)
	}
	if prev != nil && found < len(prev.specOrder) {
		names := make(map[string]bool, len(spec.Services))
		for i := range spec.Services {
			names[spec.Services[i].Name] = true
		}
		for _, ps := range prev.specOrder {
			if !names[ps.name] {
				t.dropped = append(t.dropped, ps)
			}
		}
	}
	byLength(t.hostless)
	for _, ss := range t.byHost {
		byLength(ss)
	}
	// Nothing fails past this point: the table is the one Apply swaps in.
	p.linkPeers(t, prev)
	p.retainShared(t)
	p.um.upstreams.publish(p.shared)
	return t, nil
}

func oneValue(v string) []string { return []string{v}[:1:1] }

// byLength sorts ss by base path length, longest first, keeping the order
// of those of the same length: a counting sort, as base paths are short
// and a generation may have thousands of them.
func byLength(ss []*service) {
	if len(ss) < 2 {
		return
	}
	longest := 0
	for _, s := range ss {
		longest = max(longest, len(s.basePath))
	}
	// at[k] is where the first service whose base path is longest-k
	// characters long goes.
	at := make([]int, longest+1)
	for _, s := range ss {
		if k := longest - len(s.basePath); k < longest {
			at[k+1]++
		}
	}
	for k := 1; k <= longest; k++ {
		at[k] += at[k-1]
	}
	sorted := make([]*service, len(ss))
	for _, s := range ss {
		k := longest - len(s.basePath)
		sorted[at[k]] = s
		at[k]++
	}
	copy(ss, sorted)
}

// forgetUpstreams drops the shared state and closes the pools of the
// upstreams names, which a failed compile made and no table has. Called
// under applyMu.
func (p *Proxy) forgetUpstreams(names []string) {
	if len(names) == 0 {
		return
	}
	gone := make(map[string]bool, len(names))
	for _, name := range names {
		p.dropShared(name)
		gone[name] = true
	}
	for key, cp := range p.pools {
		if gone[cp.Watch.upstream] {
			cp.close()
			delete(p.pools, key)
		}
	}
}

// reserve makes room in the proxy's maps of what outlives generations
// (pools, metric children, upstreams' shared state) for spec's, when
// they hold much less (as before a first apply), so that they do not grow
// step by step while it compiles. Called under applyMu.
func (p *Proxy) reserve(spec *config.Spec) {
	endpoints := 0
	for i := range spec.Upstreams {
		endpoints += len(spec.Upstreams[i].Endpoints)
	}
	p.pools = reserved(p.pools, endpoints)
	p.children = reserved(p.children, max(len(spec.Services), len(spec.Upstreams)))
	p.shared = reserved(p.shared, len(spec.Upstreams))
}

// reserved is m, or a copy of it with room for n entries when it holds
// fewer than half as many.
func reserved[K comparable, V any](m map[K]V, n int) map[K]V {
	if m != nil && len(m) >= n/2 {
		return m
	}
	r := make(map[K]V, n)
	maps.Copy(r, m)
	return r
}

// newTarget is a target of service on upstream u in the generation whose
// X-Dwara-Generation value is hdrGen, with its metric series.
func (p *Proxy) newTarget(service string, u *upstream, hdrGen []string) *Target {
	return &Target{
		Up:            u,
		targetMetrics: p.targetMetrics(service, u.name),
		HdrService:    oneValue(service),
		HdrUpstream:   oneValue(u.name),
		HdrGeneration: hdrGen,
	}
}

// add files cs, the next service of the spec, of host (any case; "" for
// none), in t.
func (t *Table) add(host string, cs *service) {
	t.specOrder = append(t.specOrder, cs)
	if host == "" {
		t.hostless = append(t.hostless, cs)
		return
	}
	h := strings.ToLower(host)
	t.byHost[h] = append(t.byHost[h], cs)
}

// upstreamAt returns the upstream of t (nil: none) named name, looked up
// at place i of t's spec first.
func (t *Table) upstreamAt(i int, name string) *upstream {
	switch {
	case t == nil:
		return nil
	case i < len(t.upstreamOrder) && t.upstreamOrder[i].name == name:
		return t.upstreamOrder[i]
	}
	return t.upstreams[name]
}

// serviceAt returns the service of t (the table served, nil for none)
// named name, looked up at place i of t's spec first: a generation that
// edits services in place keeps the others' places. Called under applyMu.
func (t *Table) serviceAt(i int, name string) *service {
	if t == nil {
		return nil
	}
	if i < len(t.specOrder) && t.specOrder[i].name == name {
		return t.specOrder[i]
	}
	if t.byName == nil {
		t.byName = make(map[string]*service, len(t.specOrder))
		for _, s := range t.specOrder {
			t.byName[s.name] = s
		}
	}
	return t.byName[name]
}

// carryable reports whether a service compiled from s may be carried over
// to the next generation of the same configuration: one with none of the
// state a generation has its own of (the recorders of canary analysis,
// model aliases and their recorders, a mirror, a cache).
func carryable(s *config.Service) bool {
	return (s.Split == nil || s.Split.CanaryAnalysis == nil) && s.Mirror == nil && s.Models == nil && s.Cache == nil
}

// carrySlab allocates the services and targets that a compile carries
// over in chunks, not one by one.
type carrySlab struct {
	services []service
	targets  []Target
	ptrs     []*Target
}

// carry returns a service compiled as ps, of the generation served, was:
// ps's split, rules, sticky settings and metrics, with targets of its own
// that name the new generation (hdrGen). nil when an upstream of ps is not
// carried over by this compile (its configuration changed or it is gone),
// as the service must then be compiled again. n is the number of services
// of the generation, which bounds how many are carried over.
func (sl *carrySlab) carry(ps *service, compile int64, hdrGen []string, n int) *service {
	for _, tg := range ps.targets {
		if tg.Up.goneAt == compile {
			return nil
		}
	}
	if len(sl.services) == cap(sl.services) {
		sl.services = make([]service, 0, min(n, 4096))
	}
	sl.services = sl.services[:len(sl.services)+1]
	cs := &sl.services[len(sl.services)-1]
	cs.name, cs.basePath = ps.name, ps.basePath
	cs.sticky, cs.override, cs.branches = ps.sticky, ps.override, ps.branches
	cs.rules, cs.matched = ps.rules, ps.matched
	cs.cfg, cs.carryable = ps.cfg, true
	cs.split.Store(ps.split.Load())
	k := len(ps.targets)
	if cap(sl.targets)-len(sl.targets) < k {
		sl.targets = make([]Target, 0, max(k, 4096))
		sl.ptrs = make([]*Target, 0, max(k, 4096))
	}
	ts := sl.targets[len(sl.targets) : len(sl.targets)+k : len(sl.targets)+k]
	sl.targets = sl.targets[:len(sl.targets)+k]
	cs.targets = sl.ptrs[len(sl.ptrs) : len(sl.ptrs)+k : len(sl.ptrs)+k]
	sl.ptrs = sl.ptrs[:len(sl.ptrs)+k]
	for i, tg := range ps.targets {
		tg.targetMetrics.compiled = compile
		ts[i] = Target{Up: tg.Up, targetMetrics: tg.targetMetrics, HdrService: tg.HdrService, HdrUpstream: tg.HdrUpstream, HdrGeneration: hdrGen}
		cs.targets[i] = &ts[i]
	}
	return cs
}

func (p *Proxy) compileUpstream(u config.Upstream) (*upstream, error) {
	if len(u.Endpoints) > config.MaxEndpoints {
		return nil, fmt.Errorf("upstream %q: %d endpoints, at most %d", u.Name, len(u.Endpoints), config.MaxEndpoints)
	}
	cu := &upstream{name: u.Name, passive: passiveOf(u.Passive), cfg: u.Clone(), shared: p.upstreamShared(u.Name)}
	states := make([]*balance.State, len(u.Endpoints))
	eps := make([]Endpoint, len(u.Endpoints)) // in one allocation
	cu.endpoints = make([]*Endpoint, 0, len(u.Endpoints))
	for i, addr := range u.Endpoints {
		target, err := config.ParseEndpoint(addr)
		if err != nil {
			return nil, fmt.Errorf("upstream %q: %w", u.Name, err)
		}
		states[i] = p.reg.Get(addr)
		ep := &eps[i]
		*ep = Endpoint{
			Addr:       addr,
			state:      states[i],
			index:      i,
			HostHeader: target.Host,
		}
		ep.Pool, ep.poolKey = p.pool(cu, target.Scheme, target.Host)
		ep.Pool.setTimeouts(millis(u.ConnectTimeoutMS, config.DefaultConnectTimeoutMS),
			millis(u.ResponseHeaderTimeoutMS, config.DefaultResponseHeaderTimeoutMS),
			millis(u.IdleTimeoutMS, config.DefaultIdleTimeoutMS))
		ep.Pool.allowLinkLocal.Store(u.AllowLinkLocal)
		cu.endpoints = append(cu.endpoints, ep)
	}
	b, err := balance.New(u.Balancer, u.Endpoints, states)
	if err != nil {
		return nil, fmt.Errorf("upstream %q: %w", u.Name, err)
	}
	cu.balancer = b
	return cu, nil
}

// millis is ms milliseconds, or def milliseconds when ms is not positive.
func millis(ms, def int) time.Duration {
	if ms <= 0 {
		ms = def
	}
	return time.Duration(ms) * time.Millisecond
}

// pool returns the connection pool of endpoint host of upstream u, reached
// with scheme (http or https: over TLS), creating it on first use. Pools
// are kept per upstream, scheme and endpoint, so each upstream's timeouts
// apply to its own connections, and a plain connection never serves an
// https endpoint at the same address. Called under applyMu.
func (p *Proxy) pool(u *upstream, scheme, host string) (cp *connPool, key string) {
	key = u.name + " " + scheme + " " + host
	cp = p.pools[key]
	if cp == nil {
		cp = newConnPool(host)
		if scheme == "https" {
			cp.tlsConfig = upstreamTLSConfig(p.upstreamTLS, host)
		}
		cp.Watch = &protocolWatch{upstream: u.name, endpoint: host, counters: &u.shared.protocol, log: p.log}
		p.pools[key] = cp
	}
	return cp, key
}

// match returns the service for host (as the client sent it: any case, with
// or without port) and path: the longest base path on a segment boundary
// among the services of that host, else among the hostless ones. nil when
// none matches. It does not allocate.
func (t *Table) match(host, path string) *service {
	if len(t.byHost) > 0 {
		host = stripPort(host)
		var ss []*service
		if hasUpper(host) && len(host) <= 255 {
			var buf [255]byte
			for i := 0; i < len(host); i++ {
				c := host[i]
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				buf[i] = c
			}
			ss = t.byHost[string(buf[:len(host)])] // no allocation for a map key conversion
		} else {
			ss = t.byHost[host]
		}
		if s := longestPrefix(ss, path); s != nil {
			return s
		}
	}
	return longestPrefix(t.hostless, path)
}

func longestPrefix(ss []*service, path string) *service {
	for _, s := range ss {
		if pathHasPrefix(path, s.basePath) {
			return s
		}
	}
	return nil
}

// pathHasPrefix reports whether base is a prefix of path on a segment
// boundary: "/v1" matches "/v1" and "/v1/x" but not "/v1x"; "/" matches all.
func pathHasPrefix(path, base string) bool {
	if base == "/" {
		return true
	}
	if !strings.HasPrefix(path, base) {
		return false
	}
	return len(path) == len(base) || path[len(base)] == '/'
}

// stripPort returns host without its port and IPv6 brackets.
func stripPort(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return true
		}
	}
	return false
}

// services returns every service of the table (for bookkeeping at apply
// time, not for requests).
func (t *Table) services() []*service {
	all := append([]*service(nil), t.hostless...)
	for _, ss := range t.byHost {
		all = append(all, ss...)
	}
	return all
}
