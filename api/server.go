// Package api is the REST API of Dwara's control plane: a chi router whose
// routes (routes.go) implement openapi/openapi.yaml, with one file per
// resource (generations, services, audit, gateways, events, health).
//
// Every answer carries X-Request-Id; every error is an RFC 9457
// application/problem+json body, and a 5xx never shows its cause (the log has
// it under the request id). Every /api/ call needs the bearer token when the
// server has one. Every mutating call, accepted or refused, is written to the
// audit log before it is answered. Spec validation is the data plane's own
// (gateway/config), so whatever the API accepts the proxy can serve.
package api

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/web"
)

// Options configures a Server. Store is required; every other zero value is
// documented on its field.
type Options struct {
	// Store holds generations, the audit log and gateway instances.
	// Required.
	Store *db.Store
	// Token is the admin token (DWARA_ADMIN_TOKEN) every /api/ call must
	// present as "Authorization: Bearer <token>"; "" means no auth (bind the
	// listener to loopback then).
	Token string
	// Logger receives request logs and the causes of 5xx answers; nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics is served at GET /metrics; nil means 404 there.
	Metrics http.Handler
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
	// for a change that stored nothing (unchanged).
	OnPublish func(ctx context.Context, generation int64, spec *config.Spec) error
}

// Server is the control-plane API. Create it with New; serve Handler, run
// Run for the event streams, and feed it the process's notifications with
// Notify and Connected. It is safe for concurrent use and must not be
// copied.
type Server struct {
	store          *db.Store
	hasToken       bool
	tokenSum       [sha256.Size]byte
	log            *slog.Logger
	metricsHandler http.Handler
	ready          func() bool
	onPublish      func(ctx context.Context, generation int64, spec *config.Spec) error
	docsHandler    http.Handler
	handler        http.Handler

	hub       *hub
	queue     chan notification // from Notify to Run
	pingEvery time.Duration
	closing   chan struct{} // closed when Run returns: event streams end
	closeOnce sync.Once
}

// New returns a Server for o. It panics when o.Store is nil, a programming
// error.
func New(o Options) *Server {
	if o.Store == nil {
		panic("api: New with nil Options.Store")
	}
	s := &Server{
		store:          o.Store,
		hasToken:       o.Token != "",
		tokenSum:       sha256.Sum256([]byte(o.Token)),
		log:            o.Logger,
		metricsHandler: o.Metrics,
		ready:          o.Ready,
		onPublish:      o.OnPublish,
		docsHandler:    web.Docs("/openapi.yaml", "/docs/"),
		hub:            newHub(),
		queue:          make(chan notification, notifyQueue),
		pingEvery:      pingInterval,
		closing:        make(chan struct{}),
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

// Handler returns the HTTP handler of the whole admin listener: /api/v1,
// /openapi.yaml, /docs, /healthz, /readyz and /metrics. The same handler is
// returned on every call.
func (s *Server) Handler() http.Handler {
	return s.handler
}
