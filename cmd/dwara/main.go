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
	"syscall"

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
Environment: DWARA_DATABASE_URL (database), DWARA_ADMIN_TOKEN (API bearer token), DWARA_API_URL (API of the client verbs),
DWARA_LOG_LEVEL (debug|info|warn|error).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
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

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("DWARA_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

func serve(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := node.ServeConfig{Process: node.Process{Logger: log}, AdminToken: os.Getenv("DWARA_ADMIN_TOKEN")}
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen address")
	fs.StringVar(&c.AdminListen, "admin-listen", node.DefaultAdminListen, "API, docs and metrics listen address (loopback only unless DWARA_ADMIN_TOKEN is set)")
	fs.StringVar(&c.DatabaseURL, "database-url", os.Getenv("DWARA_DATABASE_URL"), "PostgreSQL URL (default $DWARA_DATABASE_URL)")
	fs.BoolVar(&c.Demo, "demo", false, "start two demo upstream pools and seed an example 90/10 split into an empty database")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.Started = func(a node.Addrs) { banner(os.Stderr, a, c.Demo) }
	return node.Serve(ctx, c)
}

func gateway(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	c := node.GatewayConfig{Process: node.Process{Logger: log}}
	fs.StringVar(&c.ConfigFile, "config", "", "serve from this YAML/JSON spec file (reloaded on change and on SIGHUP)")
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen address")
	fs.StringVar(&c.MetricsListen, "metrics-listen", node.DefaultMetricsListen, "/metrics, /healthz and /readyz listen address")
	fs.StringVar(&c.Front, "front", node.FrontNetHTTP, "HTTP server of the proxy listener: net/http, or fasthttp (experimental: HTTP/1.1 only, upgrades answered 501)")
	fs.BoolVar(&c.Profile, "pprof", false, "also serve Go runtime profiles under /debug/pprof/ on the metrics listener (keep it private)")
	fs.StringVar(&c.DatabaseURL, "database-url", os.Getenv("DWARA_DATABASE_URL"), "follow the generations of this PostgreSQL database (default $DWARA_DATABASE_URL; ignored with --config)")
	if err := fs.Parse(args); err != nil {
		return err
	}
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
          curl -s -X POST http://%[2]s/api/v1/services/web/flip
  canary: /shop splits the same pools 90/10 under the canary controller
    try   curl -s -X POST 'http://127.0.0.1:9101/fail?rate=0.2'   (the canary fails 20%%)
          for i in $(seq 600); do curl -so /dev/null http://%[1]s/shop/; sleep 0.05; done
          dwara canary shop                            (rolled back within a minute)
`, a.Proxy, a.Admin)
	}
	fmt.Fprintln(w)
}
