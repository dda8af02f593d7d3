// Package api is the REST API of Dwara's control plane: a chi router whose
// routes (routes.go) implement openapi/openapi.yaml, with one file per
// resource (generations, services, audit, gateways, events, health).
//
// Every answer carries X-Request-Id; every error is an RFC 9457
// application/problem+json body, and a 5xx never shows its cause (the log has
// it under the request id). Every call but /healthz and /readyz must be
// addressed to a Host the API answers to (421 otherwise, against DNS
// rebinding). Every /api/ call needs a bearer token when the server has one
// (the read token only reads). A mutating call must be JSON or YAML (even
// with an empty body) and not cross-site (Origin, Sec-Fetch-Site), so no web
// page can post to the API. Every mutating call, accepted or refused, is
// written to the audit log before it is answered; refusals are rate-limited
// per remote address and a burst of identical ones is one entry. Database
// work has a deadline: an unreachable or hung database is a 503 with
// Retry-After, never a hang. Spec validation is the data plane's own
// (gateway/config), so whatever the API accepts the proxy can serve.
package api

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/web"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultDatabaseTimeout is the Options.DatabaseTimeout of a zero Options.
const DefaultDatabaseTimeout = 5 * time.Second

// Options configures a Server. Store is required; every other zero value is
// documented on its field.
type Options struct {
	// Store holds generations, the audit log and gateway instances.
	// Required.
	Store *db.Store
	// Token is the admin token (DWARA_ADMIN_TOKEN) every /api/ call must
	// present as "Authorization: Bearer <token>"; "" means no auth (bind the
	// listener to loopback then), unless ReadToken is set.
	Token string
	// ReadToken is a second token (DWARA_READ_TOKEN) that may make every
	// GET call of /api/ but no change: a mutating call that presents it is
	// refused with 403 and audited with the actor "read-token". Both
	// tokens are compared in constant time. "" means no read token. With
	// a ReadToken and no Token, every /api/ call needs the read token and
	// every mutating call is refused (401 without it, 403 with it): a
	// read-only API.
	ReadToken string
	// AllowedHosts are the names the API answers to besides loopback
	// ones, as a Host header names them: "name" (any port) or "name:port",
	// an IPv6 literal in brackets ("[fd00::1]:9090"). A request whose Host
	// is none of them, nor a loopback name (localhost, 127.0.0.0/8, [::1],
	// any port), nor the IP address the listener was reached on, is
	// answered 421 (all but /healthz and /readyz), so a DNS-rebinding page
	// (Host: evil.example:9090) cannot reach the API; a mutating call's
	// Origin must be the listener's own origin or one of these names.
	// Set it to the names an operator or a load balancer reaches the API
	// by. nil or empty means loopback names only. Validate entries with
	// CheckAllowedHost: New panics on one it refuses.
	AllowedHosts []string
	// DatabaseTimeout bounds the database work of each call (the pool
	// acquire, connecting, every query) and, separately, the write of its
	// audit entry: a call whose database is away or hung answers 503 with
	// Retry-After within about this long, never hangs. Zero or negative
	// means DefaultDatabaseTimeout (5 s). GET /readyz uses the smaller of
	// this and 2 s; the event stream is not bounded by it.
	DatabaseTimeout time.Duration
	// Logger receives request logs and the causes of 5xx answers; nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics is served at GET /metrics; nil means 404 there.
	Metrics http.Handler
	// Registerer receives the API's own collectors (the audit spool's);
	// nil registers them nowhere.
	Registerer prometheus.Registerer
	// GatewayRetention is how long a gateway instance not heard of is
	// kept before Run deletes it; 0 means DefaultGatewayRetention,
	// negative never deletes.
	GatewayRetention time.Duration
	// AuditSpoolSize is how many audit entries are kept in memory while
	// the database is away (auditspool.go); 0 means
	// DefaultAuditSpoolSize.
	AuditSpoolSize int
	// Ready is an extra readiness condition for GET /readyz, on top of the
	// database answering (for example: the embedded proxy applied a
	// generation). It must be safe for concurrent use; nil means always true.
	Ready func() bool
	// OnPublish, when non-nil, is called with every generation the API
	// stored and its spec (parsed and validated once, by the API), before
	// its 201 is written. `dwara serve` applies it to the embedded proxy
	// there, so the next request after the 201 is served by it. An error is
	// logged and does not change the answer: the generation is stored, and
	// the proxy's database source applies it in any case. It is not called
	// for a change that stored nothing (unchanged). Its ctx ends
	// DatabaseTimeout after the generation was stored.
	OnPublish func(ctx context.Context, generation int64, spec *config.Spec) error
	// PurgeCache, when non-nil, empties the response cache of a service
	// of the processes it reaches (`dwara serve`: its embedded proxy), or
	// only its entries whose path starts with pathPrefix when that is not
	// "", and returns how many entries it removed. nil reaches none: a
	// purge is then answered with removed 0.
	PurgeCache func(service, pathPrefix string) (removed int)
	// CacheStats, when non-nil, returns the figures of the response cache
	// of a service in this process (`dwara serve`: its embedded proxy),
	// false when it does not serve one; the API fills in service,
	// generation and hit_ratio. nil answers GET
	// /api/v1/services/{name}/cache with 503.
	CacheStats func(service string) (apiv1.CacheStats, bool)
	// Version is the build's version (`dwara version`), reported by GET
	// /healthz as "version"; "" leaves it out.
	Version string
}

// Server is the control-plane API. Create it with New; serve Handler, run
// Run for the event streams, and feed it the process's notifications with
// Notify and Connected. It is safe for concurrent use and must not be
// copied.
type Server struct {
	store          *db.Store
	hasToken       bool // an admin token is set
	hasReadToken   bool // a read token is set
	tokenSum       [sha256.Size]byte
	readTokenSum   [sha256.Size]byte
	hosts          []hostRule // Options.AllowedHosts
	dbTimeout      time.Duration
	log            *slog.Logger
	metricsHandler http.Handler
	ready          func() bool
	onPublish      func(ctx context.Context, generation int64, spec *config.Spec) error
	purger         func(service, pathPrefix string) int
	cacheStatsOf   func(service string) (apiv1.CacheStats, bool)
	version        string // Options.Version
	docsHandler    http.Handler
	handler        http.Handler

	// Audit flood control: refusals are rate-limited per remote address,
	// and a burst of identical ones is collapsed into one entry.
	refusals        *limiterSet
	bursts          *collapser
	droppedRefusals atomic.Uint64
	now             func() time.Time // the clock of both; time.Now

	// spool keeps the audit entries the database was away for
	// (auditspool.go); Run writes them.
	spool *auditSpool
	// gatewayRetention is Options.GatewayRetention, defaulted.
	gatewayRetention time.Duration

	hub       *hub
	queue     chan notification // from Notify to Run
	pingEvery time.Duration
	closing   chan struct{} // closed when Run returns: event streams end
	closeOnce sync.Once
}

// New returns a Server for o. It panics when o.Store is nil or an entry of
// o.AllowedHosts is refused by CheckAllowedHost, both programming errors
// (validate configuration before).
func New(o Options) *Server {
	if o.Store == nil {
		panic("api: New with nil Options.Store")
	}
	hosts := make([]hostRule, 0, len(o.AllowedHosts))
	for _, h := range o.AllowedHosts {
		rule, err := parseHostRule(h)
		if err != nil {
			panic("api: New: Options.AllowedHosts: " + err.Error())
		}
		hosts = append(hosts, rule)
	}
	s := &Server{
		store:          o.Store,
		hasToken:       o.Token != "",
		hasReadToken:   o.ReadToken != "",
		tokenSum:       sha256.Sum256([]byte(o.Token)),
		readTokenSum:   sha256.Sum256([]byte(o.ReadToken)),
		hosts:          hosts,
		dbTimeout:      o.DatabaseTimeout,
		log:            o.Logger,
		metricsHandler: o.Metrics,
		ready:          o.Ready,
		onPublish:      o.OnPublish,
		purger:         o.PurgeCache,
		cacheStatsOf:   o.CacheStats,
		version:        o.Version,
		docsHandler:    web.Docs("/openapi.yaml", "/docs/"),
		refusals:       newLimiterSet(refusalRate, refusalBurst, maxLimiters),
		bursts:         newCollapser(burstWindow, maxBursts),
		now:            time.Now,
		spool:          newAuditSpool(o.AuditSpoolSize, o.Registerer),
		hub:            newHub(),
		queue:          make(chan notification, notifyQueue),
		pingEvery:      pingInterval,
		closing:        make(chan struct{}),
	}
	if s.dbTimeout <= 0 {
		s.dbTimeout = DefaultDatabaseTimeout
	}
	s.gatewayRetention = o.GatewayRetention
	if s.gatewayRetention == 0 {
		s.gatewayRetention = DefaultGatewayRetention
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.ready == nil {
		s.ready = func() bool { return true }
	}
	s.handler = s.routes()
	return s
}

// RefusalsDropped returns how many refused mutating calls were answered
// 429 without an audit entry since New, because their remote address
// exceeded its rate of refusals (a counter for a metric).
func (s *Server) RefusalsDropped() uint64 {
	return s.droppedRefusals.Load()
}

// Handler returns the HTTP handler of the whole admin listener: /api/v1,
// /openapi.yaml, /docs, /healthz, /readyz and /metrics. The same handler is
// returned on every call.
func (s *Server) Handler() http.Handler {
	return s.handler
}
