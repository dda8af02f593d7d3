// Command dwara is the Dwara traffic-splitting gateway.
//
//	dwara serve   [--listen ADDR] [--admin-listen ADDR] [--database-url URL] [--demo]
//	dwara gateway --config FILE        [--listen ADDR] [--metrics-listen ADDR]
//	dwara gateway --database-url URL   [--listen ADDR] [--metrics-listen ADDR]
//	dwara migrate [--database-url URL]
//	dwara apply | flip | weights | kill | rollback | history | diff  (client verbs, package client/cli)
//
// The database URL defaults to $DWARA_DATABASE_URL; the admin token is read
// from $DWARA_ADMIN_TOKEN. The client verbs call the API at $DWARA_API_URL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dwara/dwara/client/cli"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/node"
)

const usage = `dwara — a traffic-splitting gateway with a versioned control plane

Usage:
  dwara serve   [flags]   REST API + embedded proxy, configuration in PostgreSQL
  dwara gateway [flags]   data plane only: from --config FILE, or a replica of --database-url
  dwara migrate [flags]   apply the database migrations and exit

` + cli.Usage + `
Run "dwara COMMAND -h" for the flags of a command.
Environment: DWARA_DATABASE_URL (database), DWARA_ADMIN_TOKEN (API bearer token), DWARA_READ_TOKEN (read-only
API token), DWARA_API_URL (API of the client verbs), DWARA_LOG_LEVEL (debug|info|warn|error), DWARA_LOG_FORMAT (text|json).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := newLogger(os.Stderr, os.Getenv("DWARA_LOG_FORMAT"))
	slog.SetDefault(log)

	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		err = serve(ctx, args, log)
	case "gateway":
		err = gateway(ctx, args, log)
	case "migrate":
		err = migrate(ctx, args)
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		if cli.IsVerb(cmd) {
			code := cli.Run(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv})
			stop()
			os.Exit(code)
		}
		fmt.Fprintf(os.Stderr, "dwara: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		log.Error("dwara stopped", "err", err)
		os.Exit(1)
	}
}

// newLogger returns the process's logger: JSON lines when format is
// "json", else text, at DWARA_LOG_LEVEL.
func newLogger(w io.Writer, format string) *slog.Logger {
	o := &slog.HandlerOptions{Level: logLevel()}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// processFlags registers the flags every serving command has on fs, into
// p. Call finish after fs.Parse.
func processFlags(fs *flag.FlagSet, p *node.Process) (finish func() (func(), error)) {
	l := &p.Limits
	fs.IntVar(&l.MaxConns, "max-conns", node.DefaultMaxConns, "most open client connections of the proxy listener (-1: no cap); more wait in the kernel's queue")
	fs.IntVar(&l.AdminMaxConns, "admin-max-conns", node.DefaultAdminMaxConns, "most open connections of the admin and metrics listeners each (-1: no cap)")
	fs.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", node.DefaultReadHeaderTimeout, "longest wait for a request's head, every listener")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", node.DefaultIdleTimeout, "longest wait of a keep-alive connection for its next request")
	fs.DurationVar(&l.ClientStallTimeout, "stall-timeout", 60*time.Second, "end a proxied request whose client sends or takes nothing for this long (streams that keep moving are never cut)")
	fs.DurationVar(&l.AdminReadTimeout, "admin-read-timeout", node.DefaultAdminReadTimeout, "longest read of a whole admin or metrics request, body included")
	fs.DurationVar(&l.ShutdownTimeout, "shutdown-timeout", node.DefaultShutdownTimeout, "on SIGTERM, how long in-flight requests may finish before connections are closed")
	logFormat := fs.String("log-format", envOr("DWARA_LOG_FORMAT", "text"), "log lines as text or json (default $DWARA_LOG_FORMAT, else text)")
	access := fs.Bool("access-log", false, "log one line per proxied request (request id, status, duration, service, upstream, endpoint)")
	cert := fs.String("tls-cert", "", "serve the proxy (and serve's admin listener) over TLS 1.2+ with this PEM certificate; reloaded on SIGHUP and on change")
	key := fs.String("tls-key", "", "the PEM key of --tls-cert")
	return func() (func(), error) {
		switch *logFormat {
		case "text", "json":
		default:
			return nil, fmt.Errorf("--log-format %q: want text or json", *logFormat)
		}
		p.Logger = newLogger(os.Stderr, *logFormat)
		slog.SetDefault(p.Logger)
		if *access {
			p.AccessLog = p.Logger.With("log", "access")
		}
		if (*cert == "") != (*key == "") {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		if *cert == "" {
			return func() {}, nil
		}
		p.TLS = &node.TLSFiles{Cert: *cert, Key: *key}
		reload, stop := notifyReload(syscall.SIGHUP)
		p.TLSReload = reload
		return stop, nil
	}
}

// envOr is the environment variable k, or def when it is empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// readToken returns the token of file (trailing newline removed), or env's
// value when file is "".
func readToken(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	t := strings.TrimRight(string(b), "\r\n")
	if t == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return t, nil
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("DWARA_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

func serve(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := node.ServeConfig{Process: node.Process{Logger: log}}
	finish := processFlags(fs, &c.Process)
	tokenFile := fs.String("admin-token-file", "", "read the admin token from this file instead of $DWARA_ADMIN_TOKEN (keeps it out of the environment)")
	readTokenFile := fs.String("read-token-file", "", "read the read-only token from this file instead of $DWARA_READ_TOKEN")
	fs.Var(&c.AdminHosts, "admin-host", "a host name (or host:port) the API answers to besides loopback addresses; repeat for more")
	fs.DurationVar(&c.DatabaseTimeout, "database-timeout", 5*time.Second, "bound on the database work of each API call; past it the call answers 503 with Retry-After")
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen address")
	fs.StringVar(&c.AdminListen, "admin-listen", node.DefaultAdminListen, "API, docs and metrics listen address (loopback only unless DWARA_ADMIN_TOKEN is set)")
	fs.StringVar(&c.DatabaseURL, "database-url", os.Getenv("DWARA_DATABASE_URL"), "PostgreSQL URL (default $DWARA_DATABASE_URL)")
	fs.BoolVar(&c.Demo, "demo", false, "start two demo upstream pools and seed an example 90/10 split into an empty database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stop, err := finish()
	if err != nil {
		return err
	}
	defer stop()
	if c.AdminToken, err = readToken(*tokenFile, "DWARA_ADMIN_TOKEN"); err != nil {
		return err
	}
	if c.ReadToken, err = readToken(*readTokenFile, "DWARA_READ_TOKEN"); err != nil {
		return err
	}
	c.Started = func(a node.Addrs) { banner(os.Stderr, a, c.Demo) }
	return node.Serve(ctx, c)
}

func gateway(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c := node.GatewayConfig{Process: node.Process{Logger: log}}
	finish := processFlags(fs, &c.Process)
	fs.StringVar(&c.ConfigFile, "config", "", "serve from this YAML/JSON spec file (reloaded on change and on SIGHUP)")
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen address")
	fs.StringVar(&c.MetricsListen, "metrics-listen", node.DefaultMetricsListen, "/metrics, /healthz and /readyz listen address")
	fs.StringVar(&c.Front, "front", node.FrontNetHTTP, "HTTP server of the proxy listener: net/http, or fasthttp (experimental: HTTP/1.1 only, upgrades answered 501)")
	fs.BoolVar(&c.Profile, "pprof", false, "also serve Go runtime profiles under /debug/pprof/ on the metrics listener (keep it private)")
	fs.StringVar(&c.DatabaseURL, "database-url", os.Getenv("DWARA_DATABASE_URL"), "follow the generations of this PostgreSQL database (default $DWARA_DATABASE_URL; ignored with --config)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stop, err := finish()
	if err != nil {
		return err
	}
	defer stop()
	log = c.Logger
	if c.ConfigFile == "" && c.DatabaseURL == "" {
		return errors.New("gateway needs --config FILE or --database-url URL")
	}
	if c.ConfigFile != "" {
		reload, stop := notifyReload(syscall.SIGHUP)
		defer stop()
		c.Reload = reload
	}
	c.Started = func(a node.Addrs) {
		log.Info("gateway listening", "proxy", a.Proxy, "metrics", "http://"+a.Metrics+"/metrics")
	}
	return node.Gateway(ctx, c)
}

// notifyReload turns every arrival of one of sigs into a receive on reload,
// collapsing a burst into one, until stop is called; stop returns once the
// goroutine that forwards them has ended.
func notifyReload(sigs ...os.Signal) (reload <-chan struct{}, stop func()) {
	in := make(chan os.Signal, 1)
	out := make(chan struct{}, 1)
	done, stopped := make(chan struct{}), make(chan struct{})
	signal.Notify(in, sigs...)
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-in:
				select {
				case out <- struct{}{}:
				default: // a reload is already pending
				}
			}
		}
	}()
	return out, func() {
		signal.Stop(in)
		close(done)
		<-stopped
	}
}

func migrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	url := fs.String("database-url", os.Getenv("DWARA_DATABASE_URL"), "PostgreSQL URL (default $DWARA_DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("migrate needs --database-url or DWARA_DATABASE_URL")
	}
	if err := db.EnsureDatabase(ctx, *url); err != nil {
		return err
	}
	if err := db.Migrate(ctx, *url); err != nil {
		return err
	}
	fmt.Println("migrations applied")
	return nil
}

// banner tells a newcomer where everything is.
func banner(w io.Writer, a node.Addrs, demo bool) {
	fmt.Fprintf(w, `
  dwara is running
    proxy      http://%[1]s/
    API        http://%[2]s/api/v1/generations
    API docs   http://%[2]s/docs
    metrics    http://%[2]s/metrics
`, a.Proxy, a.Admin)
	if demo {
		fmt.Fprintf(w, `
  demo: web-stable (127.0.0.1:9001, :9002) and web-canary (127.0.0.1:9101) split 90/10
    try   curl -si http://%[1]s/            (a new sticky session each time)
          curl -s -X POST -H 'Content-Type: application/json' http://%[2]s/api/v1/services/web/flip
  canary: /shop splits the same pools 90/10 under the canary controller
    try   curl -s -X POST 'http://127.0.0.1:9101/fail?rate=0.2'   (the canary fails 20%%)
          for i in $(seq 600); do curl -so /dev/null http://%[1]s/shop/; sleep 0.05; done
          dwara canary shop                            (rolled back within a minute)
`, a.Proxy, a.Admin)
	}
	fmt.Fprintln(w)
}
