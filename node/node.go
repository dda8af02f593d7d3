// Package node assembles one Dwara process from the packages that do the
// work: `dwara serve` (Serve: the REST API and the embedded proxy, fed from
// PostgreSQL), `dwara gateway --database-url` (Gateway: a data-plane replica
// fed from the same database), `dwara gateway --control-plane` (Gateway: a
// replica fed from serve's API) and `dwara gateway --config` (Gateway: a
// data plane fed from a spec file). cmd/dwara parses flags into a ServeConfig or
// a GatewayConfig and calls one of them.
//
// A process runs its parts (the HTTP listeners, the one db.Listener, the
// source of generations, the API's event loop) under one errgroup: the
// first error stops them all, and Serve and Gateway return only once every
// goroutine has stopped, before the store they use is closed. A process
// holds exactly one LISTEN connection, fanned out to its consumers (see
// listener).
package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/fleet"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/front"
	"github.com/dwara/dwara/gateway/source"
)

// Defaults of the listen addresses.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultAdminListen   = "127.0.0.1:9090"
	DefaultMetricsListen = "127.0.0.1:9091"
)

// Process holds the settings every process has: its data plane and its
// hooks; ServeConfig and GatewayConfig embed it. The zero value is usable:
// every field documents its zero value. The hooks are called from the
// process's goroutines and must be safe for concurrent use.
type Process struct {
	// Listen is the proxy's address; "" means DefaultListen.
	Listen string
	// Logger receives the process's logs; nil means slog.Default().
	Logger *slog.Logger
	// Started, when non-nil, is called once, when every listener is bound
	// and every part of the process has been started.
	Started func(Addrs)
	// Applied, when non-nil, is called after the proxy applied a generation
	// (from the database, from a publish of the embedded API, or from the
	// spec file), once per generation, possibly from several goroutines.
	Applied func(generation int64)
	// CachesReset, when non-nil, is called after each time the process
	// emptied every response cache because its feed of cache purges (the
	// LISTEN connection, or a --control-plane gateway's event stream)
	// connected: at the first connect and at every reconnect. A page cached
	// before the first one is dropped by it.
	CachesReset func()
	// Trace, when non-nil, is called at each step of a load from the
	// database (source.Database.Trace's stages, then "overlaid" once the
	// canary weights in force were read), for measurements.
	Trace func(stage string)
	// Heartbeat is how often a process fed from the database refreshes its
	// gateway_instances row; 0 means source.Database's default (5s).
	// Ignored with GatewayConfig.ConfigFile.
	Heartbeat time.Duration
	// Resync is how often a process fed from the database (or a
	// --control-plane gateway, from the API) loads the newest generation
	// without a notification (or an event); 0 means the source's default
	// (30s). Ignored with GatewayConfig.ConfigFile.
	Resync time.Duration
	// CanaryInterval is how often a process fed from the database flushes
	// its canary windows and, holding the runner lock, judges the canary
	// groups; 0 means every second. Tests shorten it. Ignored with
	// GatewayConfig.ConfigFile.
	CanaryInterval time.Duration
	// ListenDatabaseURL is the database URL of the process's LISTEN
	// connection, which needs a session of its own: a direct one when
	// DatabaseURL goes through a pooler in transaction mode (PgBouncer).
	// "" means DatabaseURL. Ignored with GatewayConfig.ConfigFile.
	ListenDatabaseURL string
	// CanaryLockRetry is how often a process that does not hold the
	// canary runner lock tries to take it; 0 means fleet.DefaultLockRetry.
	CanaryLockRetry time.Duration
	// CanaryActed, when non-nil, is called with every canary action this
	// process's runner recorded.
	CanaryActed func(apiv1.CanaryEvent)
	// CanaryLeading, when non-nil, is called with true when this process's
	// canary runner takes the runner lock and false when it loses it.
	CanaryLeading func(bool)
	// CanaryBraked, when non-nil, is called with every local brake of this
	// process's proxy (fleet.Brake.Braked).
	CanaryBraked func(apiv1.CanaryEvent)
	// CanaryBrakeReported, when non-nil, is called after each report of a
	// local brake this process wrote, with whether it was recorded
	// (fleet.Brake.Reported).
	CanaryBrakeReported func(e apiv1.CanaryEvent, recorded bool)
	// CanaryBrakeInterval is how often the proxy checks its local brake;
	// 0 means fleet.DefaultBrakeInterval. Tests shorten it.
	CanaryBrakeInterval time.Duration
	// Limits are the timeouts and caps of the process's listeners.
	Limits Limits
	// AccessLog, when non-nil, receives one line per request the proxy
	// answers; nil logs none.
	AccessLog *slog.Logger
	// TLS, when non-nil, makes the proxy listener and serve's admin
	// listener serve TLS 1.2+ (HTTP/2 and HTTP/1.1 by ALPN; on
	// FrontFastHTTP, HTTP/2 by a net/http server it hands those
	// connections to) with this certificate, loaded again on every
	// receive from TLSReload and whenever the files change; nil serves
	// plain HTTP. A gateway's metrics listener stays plain.
	TLS *TLSFiles
	// TLSReload, when non-nil, reloads the TLS certificate on every
	// receive (main feeds it SIGHUP).
	TLSReload <-chan struct{}
	// Version is the build's version (`dwara version`): /healthz reports
	// it, and /metrics as dwara_build_info{version} 1. "" means "devel".
	Version string
	// ExposureSampleRate is the fraction (0..1) of request-keyed picks a
	// process fed from the database records as exposures (sticky mints
	// and forced picks are always recorded); 0 means
	// proxy.DefaultExposureSampleRate; negative records none.
	ExposureSampleRate float64
	// ExposureRetention is how long a process fed from the database keeps
	// exposure records; 0 means fleet.DefaultExposureRetention; negative
	// never prunes them.
	ExposureRetention time.Duration

	// exposures is the exposure queue of a process fed from the database,
	// set by proxyOptions and drained by canaryParts' writer.
	exposures *proxy.ExposureQueue
}

// certificates returns the reloader of p.TLS's certificate, nil when
// p.TLS is nil; a pair that fails to load stops the process from
// starting.
func (p *Process) certificates() (*certReloader, error) {
	if p.TLS == nil {
		return nil, nil
	}
	return newCertReloader(*p.TLS, p.Logger)
}

// Limits are the timeouts and connection caps of a process's listeners.
// Zero fields mean the defaults below; none of them cuts a response that
// keeps streaming or a request body that keeps arriving.
type Limits struct {
	// MaxConns caps the proxy listener's open client connections; further
	// clients wait in the kernel's accept queue. 0 means DefaultMaxConns;
	// negative means no cap.
	MaxConns int
	// AdminMaxConns caps each of the admin and metrics listeners the same
	// way; 0 means DefaultAdminMaxConns; negative means no cap.
	AdminMaxConns int
	// ReadHeaderTimeout bounds reading a request's head on every
	// listener; 0 means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds a keep-alive connection's wait for its next
	// request on every listener; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ClientStallTimeout ends a proxied request whose client sends nothing
	// of its body or takes nothing of the answer for this long
	// (proxy.Options.ClientStallTimeout); 0 means
	// proxy.DefaultClientStallTimeout.
	ClientStallTimeout time.Duration
	// AdminReadTimeout bounds reading a whole admin or metrics request,
	// body included (1 MiB at most), so a slow sender cannot hold a
	// connection; 0 means DefaultAdminReadTimeout.
	AdminReadTimeout time.Duration
	// ShutdownTimeout bounds the graceful drain of each listener when the
	// process stops; past it the remaining connections are closed. 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
}

// Defaults of Limits.
const (
	DefaultMaxConns          = 10_000
	DefaultAdminMaxConns     = 256
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultAdminReadTimeout  = 30 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
)

func (l *Limits) defaults() {
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.AdminMaxConns == 0 {
		l.AdminMaxConns = DefaultAdminMaxConns
	}
	set(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&l.IdleTimeout, DefaultIdleTimeout)
	set(&l.AdminReadTimeout, DefaultAdminReadTimeout)
	set(&l.ShutdownTimeout, DefaultShutdownTimeout)
}

func (p *Process) defaults() {
	if p.Listen == "" {
		p.Listen = DefaultListen
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	p.Limits.defaults()
}

// proxyOptions are the options of the process's proxy.
func (p *Process) proxyOptions(reg prometheus.Registerer) proxy.Options {
	return proxy.Options{Metrics: reg, Logger: p.Logger, AccessLog: p.AccessLog, ClientStallTimeout: p.Limits.ClientStallTimeout}
}

// withExposures gives o a new exposure queue, registered with reg, which
// canaryParts' writer drains: for processes fed from the database.
func (p *Process) withExposures(o proxy.Options, reg prometheus.Registerer) proxy.Options {
	p.exposures = proxy.NewExposureQueue(0, reg)
	o.Exposures = p.exposures
	o.ExposureSampleRate = max(p.ExposureSampleRate, 0)
	if p.ExposureSampleRate == 0 {
		o.ExposureSampleRate = proxy.DefaultExposureSampleRate
	}
	return o
}

// proxyOptions are the options of serve's proxy, which records exposures.
func (c *ServeConfig) proxyOptions(reg prometheus.Registerer) proxy.Options {
	return c.withExposures(c.Process.proxyOptions(reg), reg)
}

// proxyOptions are the options of a gateway's proxy, which records
// exposures when it is fed from the database.
func (c *GatewayConfig) proxyOptions(reg prometheus.Registerer) proxy.Options {
	o := c.Process.proxyOptions(reg)
	if c.ConfigFile == "" && c.ControlPlane == "" {
		o = c.withExposures(o, reg)
	}
	return o
}

// ServeConfig is what `dwara serve` runs with. The zero value, apart from
// DatabaseURL, serves on the default loopback addresses. Serve takes a copy.
type ServeConfig struct {
	Process
	// GatewayRetention is how long a gateway instance not heard of is kept
	// (api.Options.GatewayRetention); 0 means api.DefaultGatewayRetention.
	GatewayRetention time.Duration
	// AdminListen is the address of the API, its docs and /metrics; ""
	// means DefaultAdminListen. Without AdminToken it must be loopback.
	AdminListen string
	// DatabaseURL is the PostgreSQL URL. Required.
	DatabaseURL string
	// AdminToken protects /api/ (DWARA_ADMIN_TOKEN); "" allows only a
	// loopback AdminListen.
	AdminToken string
	// ReadToken, when not "", is a second token that may read the API but
	// not change anything (DWARA_READ_TOKEN).
	ReadToken string
	// AdminHosts are the host names (or host:port) the API answers to
	// besides loopback addresses; a request for any other Host is refused,
	// which defeats DNS rebinding. Set it to the names an operator or a
	// load balancer reaches the API by.
	AdminHosts HostList
	// DatabaseTimeout bounds the database work of each API call; past it
	// the call answers 503 with Retry-After. 0 means
	// api.DefaultDatabaseTimeout.
	DatabaseTimeout time.Duration
	// Demo starts the built-in demo upstreams and seeds an example
	// generation into an empty database; false starts neither.
	Demo bool
	// DemoPorts are the demo pools' ports; the zero value means
	// DefaultDemoPorts.
	DemoPorts DemoPorts
	// Front is the HTTP server of the proxy listener (front.New):
	// FrontFastHTTP ("" stands for it; see fastfront.NewServer), which
	// serves HTTP/1.1 itself and, with TLS, hands the connections that
	// negotiate HTTP/2 to a net/http server of the same proxy; or
	// FrontNetHTTP, Go's net/http server for everything; anything else is
	// refused.
	Front string
	// HTTP2 is the server of the HTTP/2 connections of the fasthttp front
	// with TLS (front.Config.HTTP2): HTTP2Dwara ("" stands for it) or
	// HTTP2NetHTTP; the net/http front takes only the latter.
	HTTP2 string
}

// HostList is a list of host names, a flag.Value that takes one per Set.
type HostList []string

// String returns the names, comma-separated.
func (h *HostList) String() string { return strings.Join(*h, ",") }

// Set appends one name: host or host:port ([v6]:port), as
// api.CheckAllowedHost accepts.
func (h *HostList) Set(v string) error {
	v = strings.TrimSpace(v)
	if err := api.CheckAllowedHost(v); err != nil {
		return err
	}
	*h = append(*h, v)
	return nil
}

// GatewayConfig is what `dwara gateway` runs with. Exactly one of
// ConfigFile, ControlPlane and DatabaseURL chooses the source of
// generations; with several, ConfigFile wins, then ControlPlane. Otherwise the zero value serves on the default loopback
// addresses. Gateway takes a copy.
type GatewayConfig struct {
	Process
	// MetricsListen serves /metrics, /healthz and /readyz; "" means
	// DefaultMetricsListen.
	MetricsListen string
	// DatabaseURL makes the gateway a replica that follows the newest
	// generation in this PostgreSQL database; "" needs ConfigFile.
	DatabaseURL string
	// ConfigFile makes the gateway serve this YAML/JSON spec file,
	// reloaded when it changes; "" needs DatabaseURL or ControlPlane.
	ConfigFile string
	// ControlPlane makes the gateway a replica that follows the API of
	// `dwara serve` at this URL (its admin listener, e.g.
	// "http://10.0.0.5:9090"; no scheme means http) instead of the
	// database: generations and canary weights from its event stream,
	// reports and canary windows sent to it. Such a gateway needs no
	// database credentials, records no exposures and runs no canary
	// runner. "" needs ConfigFile or DatabaseURL.
	ControlPlane string
	// ControlPlaneToken is sent as "Authorization: Bearer <token>" on
	// every call to ControlPlane; the reports need serve's admin token.
	// "" sends none (a serve without DWARA_ADMIN_TOKEN).
	ControlPlaneToken string
	// Reload, when non-nil, reloads ConfigFile on every receive, even when
	// its content did not change (main feeds it SIGHUP); nil reloads only
	// on change. Ignored without ConfigFile.
	Reload <-chan struct{}
	// Front is the HTTP server of the proxy listener, as ServeConfig.Front.
	Front string
	// HTTP2 is the server of its HTTP/2 connections, as ServeConfig.HTTP2.
	HTTP2 string
	// Profile serves the Go runtime profiles (net/http/pprof) under
	// /debug/pprof/ on the metrics listener; false serves none. They show
	// the process's internals: keep the metrics listener private.
	Profile bool
	// StateDir, with DatabaseURL or ControlPlane, is where the gateway
	// keeps the last generation it applied (state.go), and serves it from
	// at start, before the source answers; "" keeps none. `dwara gateway`
	// defaults it to a directory under the user's cache directory.
	StateDir string
}

// The fronts of ServeConfig.Front and GatewayConfig.Front: proxy's kinds
// of front (front.Config.Kind).
const (
	FrontNetHTTP  = front.NetHTTP
	FrontFastHTTP = front.FastHTTP
)

// DefaultFront is the front "" stands for: FrontFastHTTP.
func DefaultFront() string { return front.Default() }

// The HTTP/2 servers of ServeConfig.HTTP2 and GatewayConfig.HTTP2
// (front.Config.HTTP2); "" stands for HTTP2Dwara.
const (
	HTTP2Dwara   = front.HTTP2Dwara
	HTTP2NetHTTP = front.HTTP2NetHTTP
)

// Addrs are the bound addresses of a running process ("" when not served).
type Addrs struct {
	Proxy, Admin, Metrics string
}

// applier returns the source.ApplyFunc of a process: it applies a
// generation to p unless p already serves it or a newer one (the database
// source and the API's publish race to apply the same generations), and
// calls applied, when non-nil, for each generation it applied.
func applier(p *proxy.Proxy, applied func(spec *config.Spec, generation int64)) source.ApplyFunc {
	return func(_ context.Context, spec *config.Spec, generation int64) error {
		ok, err := p.ApplyNewer(spec, generation)
		if ok && applied != nil {
			applied(spec, generation)
		}
		return err
	}
}

// newRegistry returns a metrics registry with the Go and process
// collectors and dwara_build_info{version} 1 for the build's version ("":
// "devel").
func newRegistry(version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dwara_build_info",
		Help: "Always 1; the version label is the version of the running build.",
	}, []string{"version"})
	build.WithLabelValues(cmp.Or(version, "devel")).Set(1)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), build)
	return reg
}

func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
}

// openStore creates the database if needed, migrates it and opens it.
func openStore(ctx context.Context, url string) (*db.Store, error) {
	if url == "" {
		return nil, errors.New("no database: set --database-url or DWARA_DATABASE_URL")
	}
	if err := db.EnsureDatabase(ctx, url); err != nil {
		return nil, err
	}
	if err := db.Migrate(ctx, url); err != nil {
		return nil, err
	}
	return db.Open(ctx, url)
}

// databaseSource returns the source of a process fed from the database: it
// follows the newest generation in store, applies it to px with apply
// (skipping what px already serves, such as a publish the API of the same
// process applied before its 201) and reports this process, whose proxy is
// bound at proxyAddr, in gateway_instances, with the states of px's
// endpoints.
func (p *Process) databaseSource(store *db.Store, proxyAddr string, px *proxy.Proxy, apply source.ApplyFunc) *source.Database {
	return &source.Database{
		Store:    store,
		Instance: instance(proxyAddr),
		// A generation the canary controller already changed is applied
		// with the weights in force for it.
		Apply: func(ctx context.Context, spec *config.Spec, generation int64) error {
			spec, err := fleet.Overlay(ctx, store, spec, generation)
			if err != nil {
				return err
			}
			if p.Trace != nil {
				p.Trace("overlaid")
			}
			return apply(ctx, spec, generation)
		},
		Serving:   px.Generation,
		Endpoints: px.Endpoints,
		Heartbeat: p.Heartbeat,
		Resync:    p.Resync,
		Logger:    p.Logger,
		Trace:     p.Trace,
	}
}

// listenURL is the connection string of the process's LISTEN connection.
func (p *Process) listenURL(store *db.Store) string {
	if p.ListenDatabaseURL != "" {
		return p.ListenDatabaseURL
	}
	return store.ConnString()
}

// openReplicaStore opens the store of a gateway fed from the database as
// openProcessStore does, but neither creates nor migrates the database,
// and needs no answer from it to return: a replica starts (and serves its
// last-known generation) while PostgreSQL is away. Its role needs only to
// read generations and canary records and to write its instance,
// windows and exposures (docs/canary.md).
func (p *Process) openReplicaStore(url string) (*db.Store, error) {
	if url == "" {
		return nil, errors.New("no database: set --database-url or DWARA_DATABASE_URL")
	}
	store, err := db.Open(context.Background(), url)
	if err != nil {
		return nil, err
	}
	store.SetSessionConnString(p.ListenDatabaseURL)
	return store, nil
}

// openProcessStore opens the store of a process fed from the database: the
// pool on DatabaseURL; sessions (the canary runner's lock) on
// ListenDatabaseURL when set.
func (p *Process) openProcessStore(ctx context.Context, url string) (*db.Store, error) {
	store, err := openStore(ctx, url)
	if err != nil {
		return nil, err
	}
	store.SetSessionConnString(p.ListenDatabaseURL)
	return store, nil
}

// canary is the canary side of a process fed from the database: the
// flusher of its windows, the follower of transient weights, the local
// brake and a runner.
type canaryParts struct {
	flusher  *fleet.Flusher
	follower *fleet.Follower
	brake    *fleet.Brake
	runner   *fleet.Runner
	// exposures writes the proxy's exposure records; nil when it has none.
	exposures *fleet.ExposureWriter
}

// canaryParts returns the canary parts of a process whose data plane px
// (changed through w: px itself, or a gateway's weights kept in its state
// directory) is reported as instance and whose metrics go to reg. The
// follower sets weights through the brake's guard, so a brake holds until
// it is reported or a newer weight is recorded; the flusher feeds the
// brake's local windows and keeps its rows back while a brake waits to be
// reported; a report wakes the follower.
func (p *Process) canaryParts(store *db.Store, instance string, px *proxy.Proxy, w fleet.BrakeProxy, reg prometheus.Registerer) canaryParts {
	var exposures *fleet.ExposureWriter
	if p.exposures != nil {
		exposures = &fleet.ExposureWriter{Store: store, Instance: instance, Queue: p.exposures, Retention: p.ExposureRetention, Logger: p.Logger}
	}
	brake := p.brake(store.RunnerLive, store.RecordLocalBrake, instance, w, reg)
	follower := &fleet.Follower{Store: store, Proxy: brake.Guard(w), Resync: p.Resync, Logger: p.Logger}
	brake.Reported = func(e apiv1.CanaryEvent, recorded bool) {
		follower.Notify()
		if p.CanaryBrakeReported != nil {
			p.CanaryBrakeReported(e, recorded)
		}
	}
	return canaryParts{
		exposures: exposures,
		flusher: &fleet.Flusher{Sink: store, Instance: instance, Recorders: px.CanaryRecorders, Interval: p.CanaryInterval,
			Logger: p.Logger, Local: brake},
		follower: follower,
		brake:    brake,
		runner: &fleet.Runner{Store: store, Instance: instance, Interval: p.CanaryInterval, LockRetry: p.CanaryLockRetry,
			Metrics: reg, Logger: p.Logger, Acted: p.CanaryActed, Leading: p.CanaryLeading},
	}
}

// brake returns the local brake of a process's proxy w, reported as
// instance: live tells whether the runner is heard, report (nil: none)
// records a brake.
func (p *Process) brake(live func(context.Context) (bool, error),
	report func(context.Context, apiv1.CanaryEvent, int) (apiv1.CanaryEvent, bool, error),
	instance string, w fleet.BrakeProxy, reg prometheus.Registerer) *fleet.Brake {
	return &fleet.Brake{Live: live, Report: report, Instance: instance, Proxy: w, Interval: p.CanaryBrakeInterval,
		Metrics: reg, Logger: p.Logger, Braked: p.CanaryBraked}
}

// run runs the parts under g.
func (c canaryParts) run(ctx context.Context, g *errgroup.Group) {
	g.Go(func() error { return c.flusher.Run(ctx) })
	g.Go(func() error { return c.follower.Run(ctx) })
	g.Go(func() error { return c.brake.Run(ctx) })
	g.Go(func() error { return c.runner.Run(ctx) })
	if c.exposures != nil {
		g.Go(func() error { return c.exposures.Run(ctx) })
	}
}

// instance describes this process for gateway_instances.
func instance(listen string) apiv1.GatewayInstance {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return apiv1.GatewayInstance{
		ID:        fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		Hostname:  host,
		Listen:    listen,
		StartedAt: time.Now().UTC(),
	}
}

// server is one bound listener and the front that serves it.
type server struct {
	name  string
	ln    net.Listener
	front front.Front
	// ready, when non-nil, holds off accepting until it is closed: the
	// listener is bound (its address known, connections queue in the
	// kernel's backlog) but no connection is taken before then. A gateway's
	// proxy listener waits for its first generation this way.
	ready <-chan struct{}
}

// listenFront binds addr for the proxy px on kind: front.FastHTTP or
// front.NetHTTP ("": front.Default()), its HTTP/2 connections served by
// h2 (front.Config.HTTP2), with the timeouts and cap of l, serving TLS
// with tlsConfig when it is non-nil; any other front is an error
// (front.New).
func listenFront(kind, h2, addr string, px *proxy.Proxy, l Limits, tlsConfig *tls.Config, log *slog.Logger) (*server, error) {
	f, err := front.New(px, front.Config{
		Kind:              kind,
		HTTP2:             h2,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxConns:          l.MaxConns,
		TLS:               tlsConfig,
		Logger:            log.With("listener", "proxy"),
	})
	if err != nil {
		return nil, err
	}
	return listenWith(proxyListen(l.ReadHeaderTimeout), "proxy", addr, f)
}

// proxyListen is how the proxy listener binds. Its connections get no TCP
// keep-alive probes, as nginx's and HAProxy's do not by default: HTTP
// bounds every wait of theirs (the header and idle timeouts; an answer's
// writes fail once the client is gone), and a tunnel, which can stay
// quiet for hours, turns the probes on for itself
// (proxy.TunnelKeepAlive). That is four system calls fewer for each new
// connection. And on Linux a connection is accepted once its first bytes
// have come (TCP_DEFER_ACCEPT, nginx's listen ... deferred), or after
// head, the request-head timeout, when none come: the first read of a
// new connection then finds its request instead of an empty socket, and a
// connection that sends nothing holds no slot of --max-conns meanwhile
// (docs/performance.md).
func proxyListen(head time.Duration) net.ListenConfig {
	return net.ListenConfig{KeepAlive: -1, Control: deferAccept(head)}
}

// listenAdmin binds addr for an admin or metrics listener serving h, with
// TLS when tlsConfig is non-nil: requests are small (1 MiB at most), so
// the whole request is bounded too. Answers are not (the event stream
// lasts).
func listenAdmin(name, addr string, h http.Handler, l Limits, tlsConfig *tls.Config) (*server, error) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.AdminReadTimeout,
		IdleTimeout:       l.IdleTimeout,
	}
	return listen(name, addr, front.NewServerFront(srv, tlsConfig, l.AdminMaxConns))
}

// listen binds addr for f, its connections probed by TCP keep-alive
// (Go's default).
func listen(name, addr string, f front.Front) (*server, error) {
	return listenWith(net.ListenConfig{}, name, addr, f)
}

// listenWith binds addr for f as lc does.
func listenWith(lc net.ListenConfig, name, addr string, f front.Front) (*server, error) {
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	return &server{name: name, ln: ln, front: f}, nil
}

func (s *server) addr() string { return s.ln.Addr().String() }

// serveHTTP serves every server under g: each until ctx is done, then it is
// shut down gracefully (shutdownTimeout at most, then its front closes
// what it can: see front.New). A listener that fails returns its
// error to g, which stops the process.
func serveHTTP(ctx context.Context, g *errgroup.Group, log *slog.Logger, shutdownTimeout time.Duration, servers ...*server) {
	for _, s := range servers {
		g.Go(func() error {
			if s.ready != nil {
				select {
				case <-s.ready:
				case <-ctx.Done():
					// Stopped before it was ready: nothing was accepted,
					// so the queued connections are refused by the close.
					_ = s.ln.Close()
					return nil
				}
			}
			if err := s.front.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("%s listener: %w", s.name, err)
			}
			return nil
		})
		g.Go(func() error {
			<-ctx.Done()
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
			defer cancel()
			if err := s.front.Shutdown(sctx); err != nil {
				log.Warn("graceful shutdown incomplete; closing the remaining connections", "listener", s.name, "err", err)
			}
			return nil
		})
	}
}

// closeAll closes the listeners of servers that were bound but never
// served.
func closeAll(servers ...*server) {
	for _, s := range servers {
		if s != nil {
			_ = s.ln.Close()
		}
	}
}

// isLoopback reports whether a listen address binds only loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
