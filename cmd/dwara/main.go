// Command dwara is the Dwara traffic-splitting gateway.
//
//	dwara serve   [--listen ADDR] [--admin-listen ADDR] [--database-url URL] [--demo [--reset]]
//	dwara gateway --config FILE        [--listen ADDR] [--metrics-listen ADDR]
//	dwara gateway --database-url URL   [--listen ADDR] [--metrics-listen ADDR]
//	dwara gateway --control-plane URL  [--listen ADDR] [--metrics-listen ADDR]
//	dwara migrate [--database-url URL]
//	dwara health  [--url URL]
//	dwara version
//	dwara apply | flip | weights | kill | rollback | history | diff | ...  (client verbs, package client/cli)
//
// Every command takes --help (its usage on stdout, exit 0); a usage mistake
// prints "dwara COMMAND: problem" and the usage on stderr and exits 2. The
// database URL defaults to $DWARA_DATABASE_URL; the admin token is read
// from $DWARA_ADMIN_TOKEN. The client verbs call the API at $DWARA_API_URL.
package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
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
  dwara gateway [flags]   data plane only: from --config FILE, or a replica of --database-url or --control-plane
  dwara migrate [flags]   apply the database migrations and exit
  dwara health  [flags]   GET a /healthz and exit 0 when it answers 200 (container health checks)
  dwara version           print the version (-o json: with the Go version and platform)
  dwara completion SHELL  print the completion script of bash, zsh or fish

` + cli.Usage + `
Run "dwara COMMAND --help" (or "dwara help COMMAND") for the flags of a command.
Environment: DWARA_DATABASE_URL (database), DWARA_ADMIN_TOKEN (API bearer token), DWARA_READ_TOKEN (read-only
API token), DWARA_CONTROL_PLANE_TOKEN (token of gateway --control-plane), DWARA_API_URL (API of the client verbs),
DWARA_LOG_LEVEL (debug|info|warn|error), DWARA_LOG_FORMAT (text|json).
`

// command is one of the process commands (the client verbs are client/cli's).
type command struct {
	synopsis string
	summary  string
	// setup registers the command's flags on fs and returns what runs once
	// they are parsed, with the positional arguments.
	setup func(fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

var commands = map[string]command{
	"serve": {"[flags]", "Serve the REST API, its docs and metrics on --admin-listen and the proxy on --listen, with the\n" +
		"configuration in PostgreSQL (created and migrated at start).", setupServe},
	"gateway": {"--config FILE | --database-url URL | --control-plane URL [flags]", "Serve the proxy alone: from a spec file (reloaded on change and on SIGHUP), or as a replica\n" +
		"that follows the generations of a database, or of the API of dwara serve (no database credentials).", setupGateway},
	"migrate": {"[--database-url URL]", "Create the database if needed, apply the migrations and exit.", setupMigrate},
	"health": {"[--url URL] [--timeout 5s]", "GET the /healthz of a running dwara and exit 0 when it answers 200, else 1 (for container\n" +
		"health checks: the image has no shell or curl).", setupHealth},
	"version": {"[-o json]", "Print the version of this build.", setupVersion},
}

// completion is added at init: its script lists every command, itself
// included.
func init() {
	commands["completion"] = command{"bash|zsh|fish", "Print the shell completion script (e.g. source <(dwara completion bash)).", setupCompletion}
}

// usageError is a mistake on the command line: exit status 2, no log line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns
// the exit status.
func run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return 2
	}
	slog.SetDefault(newLogger(os.Stderr, os.Getenv("DWARA_LOG_FORMAT")))
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help", "help":
		if len(rest) == 0 {
			fmt.Fprint(os.Stdout, usage)
			return 0
		}
		if _, ok := commands[rest[0]]; ok || cli.IsVerb(rest[0]) {
			return run(ctx, []string{rest[0], "--help"})
		}
		return unknown(rest[0])
	case "-version", "--version":
		name = "version"
	}
	// "dwara --context prod history": global flags of the client verbs
	// before the verb.
	if cli.IsVerb(name) || cli.StartsWithGlobalFlag(args) {
		return cli.Run(ctx, args, cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv})
	}
	c, ok := commands[name]
	if !ok {
		return unknown(name)
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are written below, in dwara's style
	fs.Usage = func() {}
	action := c.setup(fs)
	writeUsage := func(w io.Writer) { cli.WriteUsage(w, name, c.synopsis, c.summary, fs) }
	misuse := func(msg string) int {
		cli.Misuse(os.Stderr, name, c.synopsis, msg)
		return 2
	}
	err := fs.Parse(rest)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeUsage(os.Stdout)
		return 0
	case err != nil:
		return misuse(cli.FlagError(err))
	}
	err = action(ctx, fs.Args())
	if ue, ok := errors.AsType[usageError](err); ok {
		return misuse(ue.msg)
	}
	var exit exitError
	if errors.As(err, &exit) {
		return int(exit)
	}
	// serve and gateway log how they stopped; the default logger is the
	// one of their --log-format by then.
	if err != nil {
		slog.Error("dwara stopped", "err", err)
		return 1
	}
	if name == "serve" || name == "gateway" {
		slog.Info("dwara stopped")
	}
	return 0
}

// exitError ends a command with its status after it said why itself (a
// health check that failed).
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// unknown reports an unknown command, with the closest one when it is a
// likely typo, and returns the exit status of a usage mistake.
func unknown(name string) int {
	msg := fmt.Sprintf("dwara: unknown command %q", name)
	if s := suggest(name); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	fmt.Fprintln(os.Stderr, msg)
	fmt.Fprintln(os.Stderr, `Run "dwara help" for the list of commands.`)
	return 2
}

// suggest returns the command or client verb closest to name when it is
// close enough to be a typo (at most 2 edits, and fewer than half the
// letters), else "".
func suggest(name string) string {
	best, bestDist := "", 3
	names := cli.Verbs()
	for n := range commands {
		names = append(names, n)
	}
	for _, n := range names {
		d := editDistance(strings.ToLower(strings.TrimLeft(name, "-")), n)
		if d < bestDist || d == bestDist && best != "" && n < best {
			best, bestDist = n, d
		}
	}
	if best == "" || bestDist*2 >= len(best) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b
// (bytes): insertions, deletions, substitutions and transpositions of two
// neighbours ("flpi" is 1 from "flip").
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// noArgs is the usage error of a command given positional arguments it
// does not take, or nil.
func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
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
// p. Call finish after fs.Parse; its errors are usage mistakes.
func processFlags(fs *flag.FlagSet, p *node.Process) (finish func() (func(), error)) {
	l := &p.Limits
	fs.StringVar(&p.ListenDatabaseURL, "listen-database-url", os.Getenv("DWARA_LISTEN_DATABASE_URL"),
		"a direct (session) PostgreSQL `URL` for the LISTEN connection and the canary runner's lock, when --database-url goes through a pooler in transaction mode (default $DWARA_LISTEN_DATABASE_URL, else --database-url)")
	fs.DurationVar(&p.ExposureRetention, "exposure-retention", 7*24*time.Hour, "how long exposure records are kept in the database (pruned hourly); negative keeps them for ever")
	fs.Func("exposure-sample-rate", "the fraction `0..1` of request-keyed picks recorded as exposures (default 0.01; 0 records none; new sticky sessions and forced picks are always recorded)", func(v string) error {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return errors.New("want a number from 0 to 1")
		}
		if r == 0 {
			r = -1 // node.Process: 0 means the default, negative none
		}
		p.ExposureSampleRate = r
		return nil
	})
	fs.IntVar(&l.MaxConns, "max-conns", node.DefaultMaxConns, "most open client connections of the proxy listener (-1: no cap); more wait in the kernel's queue")
	fs.IntVar(&l.AdminMaxConns, "admin-max-conns", node.DefaultAdminMaxConns, "most open connections of the admin and metrics listeners each (-1: no cap)")
	fs.DurationVar(&l.ReadHeaderTimeout, "read-header-timeout", node.DefaultReadHeaderTimeout, "longest wait for a request's head, every listener")
	fs.DurationVar(&l.IdleTimeout, "idle-timeout", node.DefaultIdleTimeout, "longest wait of a keep-alive connection for its next request")
	fs.DurationVar(&l.ClientStallTimeout, "stall-timeout", 60*time.Second, "end a proxied request whose client sends or takes nothing for this long (streams that keep moving are never cut)")
	fs.DurationVar(&l.AdminReadTimeout, "admin-read-timeout", node.DefaultAdminReadTimeout, "longest read of a whole admin or metrics request, body included")
	fs.DurationVar(&l.ShutdownTimeout, "shutdown-timeout", node.DefaultShutdownTimeout, "on SIGTERM, how long in-flight requests may finish before connections are closed")
	logFormat := fs.String("log-format", "", "log lines as `text or json` (default $DWARA_LOG_FORMAT, else text)")
	access := fs.Bool("access-log", false, "log one line per proxied request (request id, status, duration, service, upstream, endpoint)")
	cert := fs.String("tls-cert", "", "serve the proxy (and serve's admin listener) over TLS 1.2+ with this PEM certificate `FILE`; reloaded on SIGHUP and on change")
	key := fs.String("tls-key", "", "the PEM key `FILE` of --tls-cert")
	return func() (func(), error) {
		if *logFormat == "" {
			*logFormat = envOr("DWARA_LOG_FORMAT", "text")
		}
		switch *logFormat {
		case "text", "json":
		default:
			return nil, usagef("--log-format %q: want text or json", *logFormat)
		}
		p.Logger = newLogger(os.Stderr, *logFormat)
		slog.SetDefault(p.Logger)
		if *access {
			p.AccessLog = p.Logger.With("log", "access")
		}
		if (*cert == "") != (*key == "") {
			return nil, usagef("--tls-cert and --tls-key go together")
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

// frontFlag registers --front and --http2 on fs, into front and h2
// (node.DefaultFront and node.HTTP2Dwara by default). Call check after
// fs.Parse; its error is a usage mistake.
func frontFlag(fs *flag.FlagSet, front, h2 *string) (check func() error) {
	fs.StringVar(front, "front", node.DefaultFront(), "HTTP server of the proxy listener: `fasthttp or net/http` (fasthttp serves HTTP/1.1 itself and, with TLS, hands HTTP/2 connections to the server of --http2; net/http serves everything)")
	fs.StringVar(h2, "http2", node.HTTP2Dwara, "HTTP/2 server of the fasthttp front with TLS: `dwara or net/http` (dwara's own; net/http is Go's, as on --front net/http)")
	return func() error {
		switch *front {
		case node.FrontFastHTTP:
		case node.FrontNetHTTP:
			set := false
			fs.Visit(func(f *flag.Flag) { set = set || f.Name == "http2" })
			if *h2 == node.HTTP2Dwara && set {
				return usagef("--http2 %s: the %s front serves HTTP/2 itself (Go's server); --http2 chooses the server of --front %s", node.HTTP2Dwara, node.FrontNetHTTP, node.FrontFastHTTP)
			}
			if *h2 == node.HTTP2Dwara {
				*h2 = node.HTTP2NetHTTP // the default stands for the front's own
			}
		case "loop":
			return usagef("--front loop: the loop front was removed (it served no faster than fasthttp over the benchmark's workload matrix); use %s, the default, or %s", node.FrontFastHTTP, node.FrontNetHTTP)
		default:
			return usagef("--front %q: want %s or %s", *front, node.FrontFastHTTP, node.FrontNetHTTP)
		}
		if *h2 != node.HTTP2Dwara && *h2 != node.HTTP2NetHTTP {
			return usagef("--http2 %q: want %s or %s", *h2, node.HTTP2Dwara, node.HTTP2NetHTTP)
		}
		return nil
	}
}

// envOr is the environment variable k, or def when it is empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// checkHTTPURL checks that raw is an http(s) URL with a host; a URL
// without a scheme is taken as http.
func checkHTTPURL(raw string) error {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("%q: no host", raw)
	}
	return nil
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

func setupServe(fs *flag.FlagSet) func(context.Context, []string) error {
	c := node.ServeConfig{Process: node.Process{Version: buildVersion()}}
	finish := processFlags(fs, &c.Process)
	tokenFile := fs.String("admin-token-file", "", "read the admin token from this `FILE` instead of $DWARA_ADMIN_TOKEN (keeps it out of the environment)")
	readTokenFile := fs.String("read-token-file", "", "read the read-only token from this `FILE` instead of $DWARA_READ_TOKEN")
	fs.Var(&c.AdminHosts, "admin-host", "a host `NAME` (or NAME:PORT) the API answers to besides loopback addresses; repeat for more")
	fs.DurationVar(&c.DatabaseTimeout, "database-timeout", 5*time.Second, "bound on the database work of each API call; past it the call answers 503 with Retry-After")
	fs.DurationVar(&c.GatewayRetention, "gateway-retention", 24*time.Hour, "how long a gateway instance not heard of stays in GET /api/v1/gateways?all=true before it is deleted (checked every minute); negative keeps them for ever")
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen `ADDR`")
	fs.StringVar(&c.AdminListen, "admin-listen", node.DefaultAdminListen, "API, docs and metrics listen `ADDR` (loopback only unless DWARA_ADMIN_TOKEN is set)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL `URL` (default $DWARA_DATABASE_URL)")
	fs.BoolVar(&c.Demo, "demo", false, "start the demo upstream pools (ports 9001, 9002, 9101; see --demo-ports) and seed the demo spec into an empty database")
	demoPorts := fs.String("demo-ports", "", "with --demo: the demo pools' `PORTS`, web-stable's two then web-canary's (default "+node.DefaultDemoPorts.String()+")")
	reset := fs.Bool("reset", false, "with --demo: publish the demo spec as a new generation whatever is active (the history is kept)")
	checkFront := frontFlag(fs, &c.Front, &c.HTTP2)
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		c.DatabaseURL = cmp.Or(c.DatabaseURL, os.Getenv("DWARA_DATABASE_URL"))
		if c.DatabaseURL == "" {
			return usagef("no database: give --database-url URL or set DWARA_DATABASE_URL")
		}
		if *reset && !c.Demo {
			return usagef("--reset goes with --demo")
		}
		if *demoPorts != "" {
			if !c.Demo {
				return usagef("--demo-ports goes with --demo")
			}
			p, err := node.ParseDemoPorts(*demoPorts)
			if err != nil {
				return usagef("--demo-ports: %v", err)
			}
			c.DemoPorts = p
		}
		if err := checkFront(); err != nil {
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
		if *reset {
			g, err := node.ResetDemo(ctx, c.DatabaseURL, c.DemoPorts)
			if err != nil {
				return err
			}
			if g.Unchanged {
				c.Logger.Info("demo reset: the active generation already has the demo spec", "generation", g.ID)
			} else {
				c.Logger.Info("demo reset: the demo spec is published again", "generation", g.ID)
			}
		}
		c.Started = func(a node.Addrs) {
			b := bannerInfo{Addrs: a, TLS: c.TLS != nil, Demo: c.Demo, CLI: cliCommand(os.Args[0], a.Admin, c.TLS != nil),
				Token: c.AdminToken != ""}
			b.DemoStable, b.DemoCanary = c.DemoPorts.Addrs()
			if _, jsonLogs := c.Logger.Handler().(*slog.JSONHandler); jsonLogs {
				// Log lines only, for a log collector: the banner is for a person.
				c.Logger.Info("dwara serve started", "proxy", a.Proxy, "admin", a.Admin, "tls", c.TLS != nil, "front", c.Front, "demo", c.Demo)
				return
			}
			b.Active, b.Err = loadActive(ctx, c.DatabaseURL)
			banner(os.Stderr, b)
		}
		return node.Serve(ctx, c)
	}
}

func setupGateway(fs *flag.FlagSet) func(context.Context, []string) error {
	c := node.GatewayConfig{Process: node.Process{Version: buildVersion()}}
	finish := processFlags(fs, &c.Process)
	fs.StringVar(&c.ConfigFile, "config", "", "serve from this YAML/JSON spec `FILE` (reloaded on change and on SIGHUP)")
	fs.StringVar(&c.Listen, "listen", node.DefaultListen, "proxy listen `ADDR`")
	fs.StringVar(&c.MetricsListen, "metrics-listen", node.DefaultMetricsListen, "/metrics, /healthz and /readyz listen `ADDR`")
	checkFront := frontFlag(fs, &c.Front, &c.HTTP2)
	fs.BoolVar(&c.Profile, "pprof", false, "also serve Go runtime profiles under /debug/pprof/ on the metrics listener (keep it private)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "follow the generations of this PostgreSQL `URL` (default $DWARA_DATABASE_URL unless --config or --control-plane)")
	fs.StringVar(&c.ControlPlane, "control-plane", "", "follow the API of dwara serve at this `URL` (its admin listener), with no database")
	cpTokenFile := fs.String("control-plane-token-file", "", "read the control plane's admin token from this `FILE` instead of $DWARA_CONTROL_PLANE_TOKEN")
	stateDir := fs.String("state-dir", "", "keep the last applied generation in this `DIR` and serve it at start while the database or control plane is away (default: a directory per source under the user's cache directory; \"none\" keeps nothing)")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		given := 0
		for _, v := range []string{c.ConfigFile, c.DatabaseURL, c.ControlPlane} {
			if v != "" {
				given++
			}
		}
		if given > 1 {
			return usagef("give only one of --config, --database-url and --control-plane")
		}
		if given == 0 {
			c.DatabaseURL = os.Getenv("DWARA_DATABASE_URL")
		}
		if c.ConfigFile == "" && c.DatabaseURL == "" && c.ControlPlane == "" {
			return usagef("give --config FILE, --database-url URL (or set DWARA_DATABASE_URL) or --control-plane URL")
		}
		if c.ControlPlane != "" {
			if err := checkHTTPURL(c.ControlPlane); err != nil {
				return usagef("--control-plane: %v", err)
			}
			var err error
			if c.ControlPlaneToken, err = readToken(*cpTokenFile, "DWARA_CONTROL_PLANE_TOKEN"); err != nil {
				return err
			}
		} else if *cpTokenFile != "" {
			return usagef("--control-plane-token-file goes with --control-plane")
		}
		if err := checkFront(); err != nil {
			return err
		}
		switch *stateDir {
		case "none":
		case "":
			c.StateDir = defaultStateDir(cmp.Or(c.DatabaseURL, c.ControlPlane))
		default:
			c.StateDir = *stateDir
		}
		stop, err := finish()
		if err != nil {
			return err
		}
		defer stop()
		log := c.Logger
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

func setupMigrate(fs *flag.FlagSet) func(context.Context, []string) error {
	url := fs.String("database-url", "", "PostgreSQL `URL` (default $DWARA_DATABASE_URL)")
	return func(ctx context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		*url = cmp.Or(*url, os.Getenv("DWARA_DATABASE_URL"))
		if *url == "" {
			return usagef("no database: give --database-url URL or set DWARA_DATABASE_URL")
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
}

func setupVersion(fs *flag.FlagSet) func(context.Context, []string) error {
	output := fs.String("o", "", "output `FORMAT`: json (default: one line)")
	fs.StringVar(output, "output", "", "the same as -o")
	return func(_ context.Context, args []string) error {
		if err := noArgs(args); err != nil {
			return err
		}
		switch *output {
		case "":
			fmt.Println(versionLine())
		case "json":
			out, err := json.Marshal(versionInfo())
			if err != nil {
				return err
			}
			fmt.Println(string(out))
		default:
			return usagef("--output must be json, not %q", *output)
		}
		return nil
	}
}

// setupCompletion is the completion command: the completion script of a
// shell for every command, its flags and, where a SERVICE goes, the
// services of the active generation.
func setupCompletion(*flag.FlagSet) func(context.Context, []string) error {
	return func(_ context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("give one shell: bash, zsh or fish")
		}
		cmds := cli.Commands()
		for _, name := range slices.Sorted(maps.Keys(commands)) {
			fs := flag.NewFlagSet(name, flag.ContinueOnError)
			commands[name].setup(fs)
			cmds = append(cmds, cli.CommandOf(name, fs, false))
		}
		slices.SortFunc(cmds, func(a, b cli.Command) int { return strings.Compare(a.Name, b.Name) })
		if err := cli.WriteCompletion(os.Stdout, args[0], cmds); err != nil {
			return usagef("%s", err.Error())
		}
		return nil
	}
}

// defaultStateDir is --state-dir's default for a gateway following source
// (its database URL or control-plane URL): a directory of its own under
// the user's cache directory, named after a hash of the source, so that
// gateways of different fleets on one machine never serve each other's
// generations; "" (none kept) when there is no cache directory.
func defaultStateDir(source string) string {
	base, err := os.UserCacheDir()
	if err != nil || source == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(source))
	return filepath.Join(base, "dwara", "gateway-"+hex.EncodeToString(sum[:6]))
}
