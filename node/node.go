// Package node assembles one Dwara process from the packages that do the
// work: `dwara serve` (the REST API and the embedded proxy, fed from
// PostgreSQL), `dwara gateway --database-url` (a data-plane replica fed from
// the same database) and `dwara gateway --config` (a data plane fed from a
// spec file). cmd/dwara parses flags into a Config and calls one of them.
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/proxy"
)

// Defaults of the listen addresses.
const (
	DefaultListen        = "127.0.0.1:8080"
	DefaultAdminListen   = "127.0.0.1:9090"
	DefaultMetricsListen = "127.0.0.1:9091"
)

// Config is what cmd/dwara parsed. Empty fields take the defaults above.
type Config struct {
	// Listen is the proxy's address.
	Listen string
	// AdminListen is the API's address (serve only; it also serves
	// /metrics).
	AdminListen string
	// MetricsListen serves /metrics, /healthz and /readyz (gateway only).
	MetricsListen string
	// DatabaseURL is the PostgreSQL URL (serve, and gateway without
	// ConfigFile).
	DatabaseURL string
	// AdminToken protects /api/ (DWARA_ADMIN_TOKEN); "" allows only a
	// loopback AdminListen.
	AdminToken string
	// Demo starts the built-in demo upstreams and seeds an example
	// generation into an empty database (serve only).
	Demo bool
	// ConfigFile makes gateway serve from a YAML/JSON spec file.
	ConfigFile string
	// Reload triggers a reload of ConfigFile (main feeds it SIGHUP).
	Reload <-chan os.Signal
	// Logger: nil means slog.Default().
	Logger *slog.Logger
	// Started, when non-nil, is called once every listener is bound.
	Started func(Addrs)
	// Applied, when non-nil, is called after the proxy applied a generation
	// from the database.
	Applied func(generation int64)
	// Heartbeat and Resync tune the database subscriber (zero values: its
	// defaults).
	Heartbeat, Resync time.Duration
}

// Addrs are the bound addresses of a running process ("" when not served).
type Addrs struct {
	Proxy, Admin, Metrics string
}

func (c *Config) defaults() {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	if c.MetricsListen == "" {
		c.MetricsListen = DefaultMetricsListen
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// ApplyGeneration returns the Subscriber.Apply that parses a stored
// generation's spec and applies it to p unless p already serves it or a
// newer one. applied, when non-nil, is called with each generation applied.
func ApplyGeneration(p *proxy.Proxy, applied func(generation int64)) func(ctx context.Context, g db.Generation) error {
	return func(_ context.Context, g db.Generation) error {
		if g.ID <= p.Generation() {
			return nil
		}
		spec, err := config.ParseJSON(g.Spec)
		if err != nil {
			return fmt.Errorf("generation %d: %w", g.ID, err)
		}
		ok, err := p.ApplyNewer(spec, g.ID)
		if ok && applied != nil {
			applied(g.ID)
		}
		return err
	}
}

// newRegistry returns a metrics registry with the Go and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

// instance describes this process for gateway_instances.
func instance(listen string) db.GatewayInstance {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return db.GatewayInstance{
		ID:        fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		Hostname:  host,
		Listen:    listen,
		StartedAt: time.Now().UTC(),
	}
}

// server is one bound HTTP listener.
type server struct {
	name string
	ln   net.Listener
	srv  *http.Server
}

func listen(name, addr string, h http.Handler) (*server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", name, err)
	}
	return &server{name: name, ln: ln, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
	}}, nil
}

func (s *server) addr() string { return s.ln.Addr().String() }

// serveAll serves every server until ctx is done or one fails, then shuts
// them all down gracefully (10 s at most).
func serveAll(ctx context.Context, log *slog.Logger, servers ...*server) error {
	errc := make(chan error, len(servers))
	for _, s := range servers {
		go func() {
			if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s listener: %w", s.name, err)
				return
			}
			errc <- nil
		}()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		if e := s.srv.Shutdown(sctx); e != nil {
			log.Warn("shutdown", "listener", s.name, "err", e)
		}
	}
	return err
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
