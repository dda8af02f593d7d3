// Package proxy is the data plane's forwarding core: everything of a
// request's way to an endpoint and back that does not depend on the HTTP
// server that parsed it. It imports no HTTP server library; the fronts
// (gateway/proxy/fastfront for fasthttp, gateway/proxy/httpfront for
// net/http, chosen once by gateway/proxy/front) are thin adapters over
// it.
//
// A front's request goes through the core in a few steps, each a type:
// the front fills a Request (the core's view of the client's request),
// Proxy.Route routes it by the Table the front loaded (Proxy.Current),
// Route.Begin starts its Attempt (the target and endpoint serving it,
// followed through retries and failovers, and ended by Attempt.End in the
// front's deferred bookkeeping), Proxy.ExchangeRetrying sends it over the
// endpoints' connection pools with the front's sendFunc (which writes the
// head with Request.WriteHead and the rest with Proxy.Transmit), and the
// answer's head, parsed into the Conn's AnswerHead, is copied into the
// front's AnswerSink by CopyAnswer; a failure before any answer is
// answered as Proxy.ExchangeFailure decides (499, 502 or 504).
//
// A Proxy serves requests by the generation last given to Apply. Apply
// compiles the spec into an immutable table — services matched by host and
// longest base path, each with its compiled split, its upstreams' balancers,
// one connection pool per endpoint and its metric children — and
// swaps it in with one atomic store. A request does one atomic load and no
// locking, so the very next request after Apply returns is served by the new
// generation while requests already in flight finish on the old one.
//
// For each request the proxy finds the service, works out the key (the
// sticky cookie, else the request id; a sticky service without a valid cookie
// mints the handle first and sets it on the response), picks the target with
// the split, lets the target upstream's balancer pick an endpoint, and
// forwards the request with the X-Request-Id, X-Forwarded-* and X-Dwara-*
// headers of docs/spec.md, "How a request is routed".
//
// A service with model aliases (models.go) has the body of a POST to an
// OpenAI-style path read by Route, through the front's Request.Body: an
// alias is picked over its own targets and the body's model rewritten, and
// the front sends Route.Body in place of the client's stream.
//
// Failover to the next target with an endpoint up runs when every endpoint
// of the picked target is marked down in its balance.State, which the active
// health checks of the upstreams that declare health_check do
// (gateway/health). The passive checks of every upstream (passive.go) eject
// endpoints whose requests fail, but never all of an upstream's; a request
// that fails before any answer is retried on another endpoint of its
// upstream when that is safe and the upstream's retry budget allows it
// (retry.go); one whose connection every endpoint up of its target refused
// goes to the next target of the split at once (failover).
package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"log"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/balance"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/health"
	"github.com/dwara/dwara/gateway/split"
)

// Options configure a Proxy. The zero value is usable.
type Options struct {
	// Registry holds the endpoint states shared across generations, which
	// the proxy's health checks mark up and down; nil means a new private
	// one.
	Registry *balance.Registry
	// Metrics receives the data-plane collectors; nil registers them nowhere.
	Metrics prometheus.Registerer
	// UpstreamTLS configures the TLS connections to https endpoints, which
	// the endpoints' connection pools dial as they dial plain ones (the
	// upstream's connect timeout, which the handshake has again, its
	// allow_link_local): the roots to trust (RootCAs), a client
	// certificate. New clones it. Whatever it sets, a connection sends
	// the endpoint's host as its server name (no SNI for an IP address),
	// offers only http/1.1 by ALPN and speaks TLS 1.2 at least. The active
	// health checks of https endpoints trust the same roots. nil means the
	// system's roots.
	UpstreamTLS *tls.Config
	// Logger logs upstream errors, applies and health transitions; nil
	// means slog.Default().
	Logger *slog.Logger
	// AccessLog, when non-nil, gets one INFO line per request either
	// front answers (request id, method, host, path, status, duration,
	// service, upstream, endpoint, client address); nil logs none, at no
	// cost.
	AccessLog *slog.Logger

	// ClientStallTimeout ends a request whose client makes no progress for
	// this long: sends nothing of its request body, or takes nothing of
	// the answer (counted 499). A body or an answer that keeps moving is
	// never cut, however long it streams. 0 means
	// DefaultClientStallTimeout; negative means none. Both fronts apply
	// it.
	ClientStallTimeout time.Duration

	// Exposures, when non-nil, receives an exposure record of every new
	// assignment (exposure.go): each sticky handle minted, each forced
	// pick, and request-keyed picks sampled at ExposureSampleRate. nil
	// records none, at no cost.
	Exposures ExposureSink
	// ExposureSampleRate is the fraction (0..1) of request-keyed picks
	// recorded; 0 records none. Node processes default it to
	// DefaultExposureSampleRate.
	ExposureSampleRate float64

	// healthInterval is the time between two health checks of the given
	// settings; nil means interval_s seconds. Tests check faster.
	healthInterval func(config.HealthCheck) time.Duration
}

// DefaultClientStallTimeout is Options.ClientStallTimeout's default.
const DefaultClientStallTimeout = 60 * time.Second

// Proxy is the data plane's reverse proxy. It is safe for concurrent use;
// Apply may be called while requests are served. It must not be copied.
type Proxy struct {
	table    atomic.Pointer[Table]
	reg      *balance.Registry
	m        *metrics
	buffers  *BufferPool
	log      *slog.Logger
	errorLog *log.Logger
	applyMu  sync.Mutex // serialises Apply; never taken by requests
	// upstreamTLS is Options.UpstreamTLS, cloned; nil: the system roots.
	upstreamTLS *tls.Config
	// pools are the forwarding path's connection pools, by upstream,
	// scheme and endpoint; they outlive generations. Guarded by applyMu.
	pools map[string]*connPool
	// compiles counts the compiles begun, for upstream.goneAt; guarded
	// by applyMu.
	compiles int64
	// closed is set by Close (under applyMu): a generation applied after
	// it carries nothing over, as Close closed the pools.
	closed bool
	// children are the metric children of each (service, upstream) pair
	// of the table; guarded by applyMu.
	children map[string]*targetMetrics
	// health runs the active health checks of the generation being
	// served; reconciled by apply, stopped by Close.
	health *health.Manager
	// ejectMu serialises the passive checks' ejection decisions (the cap
	// per upstream); requests take it only when a failure streak reaches
	// its threshold.
	ejectMu sync.Mutex
	// shared is the retry budget and counters of each upstream, by name;
	// kept across generations, guarded by applyMu.
	shared map[string]*upstreamShared
	um     upstreamMetrics
	// stall is Options.ClientStallTimeout with the default applied; 0
	// means none.
	stall time.Duration
	// access is Options.AccessLog.
	access *slog.Logger
	// canaryGroups are the groups with a dwara_canary_weight series;
	// guarded by applyMu.
	canaryGroups []string
	// matchSeries are the (service, rule, upstream) series of
	// dwara_split_matches_total made so far. Under applyMu.
	matchSeries map[[3]string]bool
	// modelSeries are the metric children of each (service, alias,
	// upstream, model) made so far (models.go). Under applyMu.
	modelSeries map[[4]string]*modelTarget
	// mirrors sends the copies of mirrored requests (mirror.go).
	mirrors mirrorRunner
	// exp records exposures (Options.Exposures); nil when none.
	exp *exposures
	// caches are the response caches of the table served, by service;
	// guarded by applyMu. cm are their metrics, cacheClock their clock
	// (nil: time.Now; tests move it).
	caches     map[string]*serviceCache
	cm         *cacheMetrics
	cacheClock func() time.Time
}

// New returns a Proxy that answers 503 until the first Apply. The health
// checks a generation declares run from its Apply until the next Apply or
// Close, so a Proxy that applied any must be closed to stop them.
func New(o Options) *Proxy {
	p := &Proxy{
		reg:      o.Registry,
		pools:    make(map[string]*connPool),
		children: make(map[string]*targetMetrics),
		buffers:  newBufferPool(256),
		log:      o.Logger,
		stall:    o.ClientStallTimeout,
		access:   o.AccessLog,
	}
	if o.UpstreamTLS != nil {
		p.upstreamTLS = o.UpstreamTLS.Clone()
	}
	switch {
	case p.stall == 0:
		p.stall = DefaultClientStallTimeout
	case p.stall < 0:
		p.stall = 0
	}
	p.exp = newExposures(o)
	p.m = newMetrics(o.Metrics, p)
	p.cm = newCacheMetrics(o.Metrics, p)
	p.um = newUpstreamMetrics(o.Metrics)
	if p.reg == nil {
		p.reg = balance.NewRegistry()
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	p.errorLog = slog.NewLogLogger(p.log.Handler(), slog.LevelDebug)
	p.health = health.NewManager(health.Options{Logger: p.log, Interval: o.healthInterval, TLSConfig: p.upstreamTLS})
	return p
}

// Apply compiles spec and makes it the generation that serves the next
// request.
//
// spec must come from config.Parse or a spec edit, which validated it; Apply
// compiles it and does not validate it again. What it cannot compile (a nil
// spec, a service naming an unknown upstream, weights the split refuses, an
// unknown balancer, a bad endpoint) is refused with an error, never a panic,
// and the current generation keeps serving. Apply does not modify spec.
func (p *Proxy) Apply(spec *config.Spec, generation int64) error {
	_, err := p.apply(spec, generation, false)
	return err
}

// ApplyNewer is Apply for a generation newer than the one serving; an older
// or equal generation is skipped (applied false, nil error). Two sources
// racing to apply generations (the database subscriber, and the API applying
// its own publish before answering) therefore never move the proxy back.
//
// As for Apply, spec must come from config.Parse or a spec edit, which
// validated it; ApplyNewer compiles it and does not validate it again, and
// refuses with an error what it cannot compile.
func (p *Proxy) ApplyNewer(spec *config.Spec, generation int64) (applied bool, err error) {
	return p.apply(spec, generation, true)
}

func (p *Proxy) apply(spec *config.Spec, generation int64, onlyNewer bool) (bool, error) {
	start := time.Now()
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	if onlyNewer && generation <= p.Generation() {
		return false, nil
	}
	t, err := p.compile(spec, generation)
	if err != nil {
		return false, err
	}
	p.table.Store(t)
	p.retainEndpoints(t)
	p.health.Reconcile(healthTargets(spec, t))
	p.retainTargetMetrics(t)
	p.retainCaches(t)
	p.m.generation.Set(float64(generation))
	p.m.applySecs.Observe(time.Since(start).Seconds())
	return true, nil
}

// retainEndpoints forgets the states of endpoints no longer named and
// closes the connection pools of endpoints no longer served. When t
// carries over most upstreams of the table served before it, only the
// endpoints of the upstreams it no longer has are looked at.
func (p *Proxy) retainEndpoints(t *Table) {
	if ch := t.changed; ch != nil && len(ch.fresh)+len(ch.gone) <= len(t.upstreams)/4 {
		var forget []string
		for _, u := range ch.gone {
			// A pool is its upstream's (by name): the upstream of that
			// name t has, if any, is the only one that may still use it.
			var kept []*Endpoint
			if nu := t.upstreams[u.name]; nu != nil {
				kept = nu.endpoints
			}
			for _, e := range u.endpoints {
				if len(t.peers[e.Addr]) == 0 {
					forget = append(forget, e.Addr)
				}
				if e.Pool != nil && p.pools[e.poolKey] == e.Pool && !slices.ContainsFunc(kept, func(k *Endpoint) bool { return k.Pool == e.Pool }) {
					e.Pool.close()
					delete(p.pools, e.poolKey)
				}
			}
		}
		p.reg.Forget(forget...)
		return
	}
	keep := make(map[string]struct{}, len(t.peers))
	pools := make(map[*connPool]bool, len(p.pools))
	for _, u := range t.upstreams {
		for _, e := range u.endpoints {
			keep[e.Addr] = struct{}{}
			if e.Pool != nil {
				pools[e.Pool] = true
			}
		}
	}
	p.reg.Retain(keep)
	for key, cp := range p.pools {
		if !pools[cp] {
			cp.close()
			delete(p.pools, key)
		}
	}
}

// healthTargets lists the endpoints of t whose upstream declares
// health_check in spec, with the states t's balancers read.
func healthTargets(spec *config.Spec, t *Table) []health.Target {
	var targets []health.Target
	for i := range spec.Upstreams {
		u := &spec.Upstreams[i]
		if u.HealthCheck == nil {
			continue
		}
		cu := t.upstreams[u.Name]
		if cu == nil {
			continue
		}
		for _, e := range cu.endpoints {
			targets = append(targets, health.Target{Upstream: u.Name, Endpoint: e.Addr, State: e.state, Check: *u.HealthCheck, AllowLinkLocal: u.AllowLinkLocal})
		}
	}
	return targets
}

// Close stops every health check, waiting for the checkers to end, and
// closes every pooled upstream connection. Requests still in flight
// finish; their connections are closed when they end. Apply may still be
// called after Close (a process that is shutting down need not); it swaps
// the generation but starts no health checks.
func (p *Proxy) Close() {
	p.applyMu.Lock()
	defer p.applyMu.Unlock()
	p.closed = true
	p.health.Close()
	p.mirrors.stop()
	for key, cp := range p.pools {
		cp.close()
		delete(p.pools, key)
	}
}

// Generation returns the generation being served, 0 before the first Apply.
func (p *Proxy) Generation() int64 {
	if t := p.table.Load(); t != nil {
		return t.generation
	}
	return 0
}

// Registry returns the endpoint states the proxy uses.
func (p *Proxy) Registry() *balance.Registry { return p.reg }

// Route is where a request goes: its target and endpoint, and the cookie
// to set when a sticky session starts (SetCookie, made in the routed
// Request's buffer: valid while that Request serves this request; a
// front that keeps it longer copies it); or, when status is not 0, the
// problem to answer instead.
type Route struct {
	Target        *Target
	Endpoint      *Endpoint
	SetCookie     string
	Status        int
	Title, Detail string
	// Body, when not nil, is the request body Route read (models.go): the
	// front sends it instead of the client's stream, with the Request's
	// Length, and releases it once the exchange is over.
	Body *ModelBody
	// walk is how the split picked Target, for the failover of a request
	// whose every endpoint there refused the connection (Attempt); its
	// svc is nil for a forced target, which never fails over.
	walk splitWalk
}

// splitWalk is where a request stands in the walk over its service's
// split: the split it was picked by, the key's hash, the affinity key of
// the endpoint balancers, the target it is on and the targets excluded
// (marked down, or refusing connections).
type splitWalk struct {
	svc         *service
	sp          *split.Split
	hash        uint64
	affinityKey string
	ti          int
	excluded    uint8
}

// Begin begins the exchange of the request routed by rt at its endpoint,
// at now (the request's start, which the front has read already): the
// Attempt that follows it from endpoint to endpoint (and target to
// target), ended by its End.
func (rt Route) Begin(now time.Time) Attempt {
	a := newAttempt(rt.Endpoint, now)
	a.Target, a.walk = rt.Target, rt.walk
	return a
}

// Route matches the service, works out the key (the sticky cookie, minted
// first for a new session, else the request id), takes the target of the
// first match rule the request meets or else picks it by the split, and
// the endpoint by the upstream's balancer, failing over to the next target
// with an endpoint up when every endpoint of that one is marked down. It
// does not allocate: a new session's cookie is made in v's buffer
// (Route.SetCookie is valid while v serves this request).
func (p *Proxy) Route(t *Table, v *Request) Route {
	if rt, refused := Refuse(v); refused {
		return rt
	}
	svc := t.match(v.Host, v.Path)
	if svc == nil {
		return Route{Status: statusNotFound, Title: "No service matches", Detail: "no service of the active generation matches this host and path"}
	}
	if svc.override != "" {
		if name := v.get(svc.override); name != "" {
			rt := p.forcedRoute(svc, v, name)
			if p.exp != nil {
				p.exposeForced(t, svc, rt.Target, v.RequestID, v.Cookies) // exposure.go
			}
			return rt
		}
	}
	var rt Route
	key := v.RequestID
	affinityKey := ""
	if st := svc.sticky; st != nil {
		c, ok := affinity.ReadCookieLines(v.Cookies, st.cookie)
		if !ok || !affinity.Valid(c) {
			rt.SetCookie, c = st.mint(v.TLS, &v.setCookie)
			p.m.sticky.Inc()
		}
		key, affinityKey = c, c
	}
	if affinityKey == "" {
		affinityKey = v.ClientIP
	}
	if svc.models != nil && v.Method == "POST" && svc.models.handles(v.Path, svc.basePath) {
		if p.routeModel(svc, v, &rt, key, affinityKey) {
			return rt
		}
	}

	h := split.Hash(key)
	sp := svc.split.Load()
	// A match rule, when one holds, names the target instead of the pick
	// (a new session has its cookie all the same).
	ti, rule := -1, svc.rules.Match(v)
	if rule >= 0 {
		_, ti = svc.rules.Rule(rule)
	} else {
		ti = sp.PickHash(h)
	}
	tg := svc.targets[ti]
	ei := tg.Up.balancer.Pick(affinityKey)
	excluded := uint8(0)
	if ei < 0 {
		// Every endpoint of the picked target is marked down by its health
		// checks: walk the remaining weights the same way, excluding each
		// target with no endpoint up.
		excluded = uint8(1) << ti
		tg.failovers.Inc()
		for ei < 0 {
			ti = sp.PickExcluding(h, excluded)
			if ti < 0 {
				return Route{Status: statusBadGateway, Title: "No healthy upstream",
					Detail: "every endpoint of every target of service " + svc.name + " is down"}
			}
			tg = svc.targets[ti]
			if ei = tg.Up.balancer.Pick(affinityKey); ei < 0 {
				excluded |= 1 << ti
			}
		}
	}
	if rule >= 0 && excluded == 0 {
		svc.matched[rule].Inc()
	} else {
		tg.picks.Inc()
	}
	rt.Target, rt.Endpoint = tg, tg.Up.endpoints[ei]
	rt.walk = splitWalk{svc: svc, sp: sp, hash: h, affinityKey: affinityKey, ti: ti, excluded: excluded}
	if p.exp != nil {
		p.exposeRoute(t, svc, sp, ti, key, rt.SetCookie != "") // exposure.go
	}
	return rt
}

// End ends the bookkeeping of one request served (after any retries and
// failovers) by a.Endpoint of a.Target since start, with code: the
// endpoint's in-flight count and latency (a failure for a 5xx), the retry
// budget, dwara_requests_total and the duration, and the canary recorder
// unless the client went away (it is neither a request nor an error of the
// version it reached). It is each front's deferred bookkeeping of a
// forwarded request, called once.
func (a *Attempt) End(code int, start time.Time) {
	if a.cx.tc != nil && a.cx.end() {
		return // answered from the cache: no exchange to account for
	}
	tg := a.Target
	now := time.Now()
	a.end(tg.Up, code >= 500, now)
	tg.codes.inc(code)
	d := now.Sub(start)
	tg.duration.Observe(d.Seconds())
	// A provider's 429 to a model alias is counted apart (its
	// dwara_model_requests_total code) and is no request of the window:
	// neither an error nor a success of the model.
	if tg.rec != nil && code != StatusClientGone && (code != statusTooManyRequests || tg.model == nil) {
		tg.rec.Observe(d, code >= 500)
	}
	if tg.model != nil {
		tg.model.codes.inc(code)
	}
}

// forcedRoute routes a request that names its target in svc's override
// header: that target serves it whatever its weight, with no failover to
// another target and no sticky cookie minted; an existing valid cookie
// still keys the endpoint balancer. A name that is not a target is 400.
func (p *Proxy) forcedRoute(svc *service, v *Request, name string) Route {
	for _, tg := range svc.targets {
		if tg.Up.name != name {
			continue
		}
		affinityKey := v.ClientIP
		if st := svc.sticky; st != nil {
			if c, ok := affinity.ReadCookieLines(v.Cookies, st.cookie); ok && affinity.Valid(c) {
				affinityKey = c
			}
		}
		ei := tg.Up.balancer.Pick(affinityKey)
		if ei < 0 {
			return Route{Status: statusBadGateway, Title: "No healthy upstream",
				Detail: "every endpoint of the forced target " + name + " of service " + svc.name + " is down"}
		}
		tg.forced.Inc()
		return Route{Target: tg, Endpoint: tg.Up.endpoints[ei]}
	}
	return Route{Status: statusBadRequest, Title: "Unknown branch",
		Detail: svc.override + " names " + strconv.Quote(name[:min(len(name), 64)]) + ", which is not a target of service " + svc.name + "; allowed: " + svc.branches}
}

// AllowedMethods is the Allow field of a 405 answer.
var AllowedMethods = []string{"GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"}

// Refuse answers what the gateway never forwards: CONNECT (it is not a
// forward proxy) and TRACE (it would reflect the gateway's own headers,
// cookies included, to a script) with 405; PRI, HTTP/2's connection
// preface sent to an HTTP/1.1 listener, with 501; and a path with a "." or
// ".." segment (after percent-decoding, so /v1/%2e%2e/admin and
// /v1%2f..%2fadmin too) with 400, since a base path must not be escaped
// by a path the endpoint resolves elsewhere.
func Refuse(v *Request) (Route, bool) {
	switch v.Method {
	case methodConnect, methodTrace:
		return Route{Status: statusMethodNotAllowed, Title: "Method not allowed",
			Detail: "the gateway does not forward " + v.Method + " requests"}, true
	case "PRI":
		return Route{Status: statusNotImplemented, Title: "Not implemented",
			Detail: "HTTP/2 without TLS is not served; use HTTP/1.1"}, true
	}
	if hasDotSegment(v.Path) {
		return Route{Status: statusBadRequest, Title: "Bad path",
			Detail: "the path has a . or .. segment; send the resolved path"}, true
	}
	return Route{}, false
}

// hasDotSegment reports whether path has a "." or ".." segment.
func hasDotSegment(path string) bool {
	for i := 0; i < len(path); i++ {
		if path[i] != '.' || (i > 0 && path[i-1] != '/') {
			continue
		}
		j := i + 1
		if j < len(path) && path[j] == '.' {
			j++
		}
		if j == len(path) || path[j] == '/' {
			return true
		}
	}
	return false
}

// AccessLine is what an access log line tells of a request, whichever
// front parsed it.
type AccessLine struct {
	RequestID, Method, Host, Path, Client string
}

// LogAccess writes the access log line of the request l, answered with
// status, by tg and ep when it was forwarded (nil when the gateway
// answered itself). A panic of the access log's handler (the operator's
// code) loses the line, logged as an error, never the answer.
func (p *Proxy) LogAccess(l AccessLine, status int, tg *Target, ep *Endpoint, start time.Time) {
	defer func() {
		if v := recover(); v != nil {
			p.LogPanic("panic writing an access log line", v, "request_id", l.RequestID)
		}
	}()
	attrs := []slog.Attr{
		slog.String("request_id", l.RequestID),
		slog.String("method", l.Method),
		slog.String("host", l.Host),
		slog.String("path", l.Path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.String("client", l.Client),
	}
	if tg != nil {
		attrs = append(attrs, slog.String("service", tg.HdrService[0]), slog.String("upstream", tg.Up.name), slog.String("endpoint", ep.Addr))
	}
	p.access.LogAttrs(context.Background(), slog.LevelInfo, "access", attrs...)
}

// LogPanic logs v, a recovered panic, as an error with msg, args and the
// stack, and reports whether there was one (v not nil). Call it with
// recover() from a deferred function; with args, only once v is known not
// to be nil, since the args are built before the call.
func (p *Proxy) LogPanic(msg string, v any, args ...any) bool {
	if v == nil {
		return false
	}
	p.log.Error(msg, append(args, "panic", v, "stack", string(debug.Stack()))...)
	return true
}

// NewRequestID returns a fresh random request id: 32 hex digits.
func NewRequestID() string {
	var b [32]byte
	return string(AppendRequestID(b[:0]))
}

// NewRequestIDValues returns a fresh random request id as the values of
// a header field, in one allocation: the id's bytes and the slice that
// holds it are one object (the net/http front sets it so).
func NewRequestIDValues() []string {
	c := new(struct {
		v [1]string
		b [32]byte
	})
	AppendRequestID(c.b[:0])
	c.v[0] = unsafe.String(&c.b[0], len(c.b))
	return c.v[:]
}

// AppendRequestID appends a fresh random request id to dst.
func AppendRequestID(dst []byte) []byte {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], rand.Uint64())
	binary.BigEndian.PutUint64(raw[8:], rand.Uint64())
	return hex.AppendEncode(dst, raw[:])
}

// Current returns the table of the generation being served, nil before
// the first Apply: the one atomic load a front does per request, before
// it routes the request by it (Route).
func (p *Proxy) Current() *Table { return p.table.Load() }

// AccessLog returns Options.AccessLog: nil when no access log is kept.
func (p *Proxy) AccessLog() *slog.Logger { return p.access }

// StallTimeout returns the client stall timeout (Options.ClientStallTimeout
// with its default applied); 0 means none.
func (p *Proxy) StallTimeout() time.Duration { return p.stall }

// Logger returns the logger of upstream errors (Options.Logger, or
// slog.Default()).
func (p *Proxy) Logger() *slog.Logger { return p.log }

// ErrorLog returns Logger as a *log.Logger at debug level, for the HTTP
// servers' own error logs.
func (p *Proxy) ErrorLog() *log.Logger { return p.errorLog }

// Buffers returns the pool of copy buffers the proxy streams bodies
// through.
func (p *Proxy) Buffers() *BufferPool { return p.buffers }
