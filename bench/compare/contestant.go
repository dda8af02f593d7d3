package main

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
)

// dwaraCookie is the affinity cookie of the dwara-sticky contestant.
const dwaraCookie = "dwara_affinity"

// contestant is one thing wrk is pointed at.
type contestant struct {
	name string
	// tool is the program it runs ("" for direct): "nginx", "haproxy" or
	// "dwara".
	tool string
	// conf names its configuration template (see render).
	conf string
	// cookie is the affinity cookie of a sticky contestant, "" otherwise.
	cookie string
	// args are more arguments of a dwara contestant's command line.
	args []string
	// optIn: run only when named in CONTESTANTS, not by default.
	optIn bool
	// base: a dwara contestant that runs DWARA_BASE_BIN instead of
	// DWARA_BIN.
	base bool
}

// contestants lists every contestant in the order of the table.
var contestants = []contestant{
	{name: "direct"},
	{name: "nginx", tool: "nginx", conf: "nginx"},
	{name: "haproxy", tool: "haproxy", conf: "haproxy"},
	{name: "dwara", tool: "dwara", conf: "dwara"},
	{name: "haproxy-sticky", tool: "haproxy", conf: "haproxy-sticky", cookie: "SRV"},
	{name: "dwara-sticky", tool: "dwara", conf: "dwara-sticky", cookie: dwaraCookie},
	// The other fronts, for comparing them with the default (the fasthttp
	// front): CONTESTANTS=nginx,dwara,dwara-fasthttp,dwara-nethttp.
	{name: "dwara-fasthttp", tool: "dwara", conf: "dwara", args: []string{"--front", "fasthttp"}, optIn: true},
	{name: "dwara-nethttp", tool: "dwara", conf: "dwara", args: []string{"--front", "net/http"}, optIn: true},
	// Another build of dwara (DWARA_BASE_BIN), the one before a change,
	// measured in the same shuffled rounds as the build after it:
	// CONTESTANTS=nginx,dwara,dwara-base DWARA_BASE_BIN=/tmp/dwara-before.
	{name: "dwara-base", tool: "dwara", conf: "dwara", optIn: true, base: true},
}

// contestantNames returns the names of contestants, in order: all of them,
// or with all false those that run by default.
func contestantNames(all bool) []string {
	var names []string
	for _, c := range contestants {
		if all || !c.optIn {
			names = append(names, c.name)
		}
	}
	return names
}

// launch starts c, configured for workload w, on a fresh port in a
// directory of its own under b.dir and waits until GET / answers 200 (over
// https for a TLS workload). For direct it starts nothing and returns the
// first stable upstream's port (its TLS port for a TLS workload) and
// process.
func (b *bench) launch(ctx context.Context, c contestant, w workload, round int) (int, *proc, error) {
	if c.tool == "" {
		if w.tls {
			return b.directTLS, b.upstreams[0], nil
		}
		return b.pools.Stable[0], b.upstreams[0], nil
	}
	port, err := freePort()
	if err != nil {
		return 0, nil, err
	}
	dir := filepath.Join(b.dir, fmt.Sprintf("round%d-%s-%s", round, w.name, c.name))
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return 0, nil, fmt.Errorf("launch %s: %w", c.name, err)
	}
	conf := proxyConf{Listen: port, Pools: b.pools, CanaryPercent: b.k.CanaryPercent, Dir: dir, User: nginxUser(),
		Workload: w, Cert: b.cert}
	text, err := render(c.conf, conf)
	if err != nil {
		return 0, nil, err
	}
	var check, argv, env []string
	switch c.tool {
	case "nginx":
		file := filepath.Join(dir, "nginx.conf")
		common := []string{b.bins["nginx"], "-p", dir, "-c", file, "-e", filepath.Join(dir, "error.log")}
		check = append(append([]string{}, common...), "-t", "-q")
		argv = common
		err = os.WriteFile(file, text, 0o644)
	case "haproxy":
		file := filepath.Join(dir, "haproxy.cfg")
		check = []string{b.bins["haproxy"], "-c", "-q", "-f", file}
		argv = []string{b.bins["haproxy"], "-db", "-f", file}
		err = os.WriteFile(file, text, 0o644)
	case "dwara":
		file := filepath.Join(dir, "spec.yaml")
		bin := b.k.DwaraBin
		if c.base {
			bin = b.k.DwaraBaseBin
		}
		argv = []string{bin, "gateway", "--config", file,
			"--listen", loopback + ":" + strconv.Itoa(port), "--metrics-listen", loopback + ":0"}
		if w.tls {
			argv = append(argv, "--tls-cert", b.cert.Cert, "--tls-key", b.cert.Key)
		}
		argv = append(argv, c.args...)
		env = []string{"DWARA_LOG_LEVEL=warn", "DWARA_DATABASE_URL="}
		err = os.WriteFile(file, text, 0o644)
	default:
		return 0, nil, fmt.Errorf("launch %s: unknown tool %q", c.name, c.tool)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("launch %s: %w", c.name, err)
	}
	if check != nil {
		if out, err := b.ps.run(ctx, readyTimeout, c.name+" config check", nil, check...); err != nil {
			return 0, nil, fmt.Errorf("%s refused its configuration: %w%s", c.name, err, lastLines(out, 8))
		}
	}
	p, err := b.ps.start(c.name, nil, env, argv...)
	if err != nil {
		return 0, nil, err
	}
	url := schemeURL(w.scheme(), port, "/")
	if err := waitReady(ctx, b.clientFor(w), url, p); err != nil {
		b.ps.stop(p)
		return 0, nil, fmt.Errorf("%s did not come up on %s: %w", c.name, url, err)
	}
	return port, p, nil
}

// nginxUser returns "NAME GROUP" of the invoking user when it is root, for
// nginx's user directive, and "" otherwise (nginx then keeps the user it
// was started as).
func nginxUser() string {
	if os.Geteuid() != 0 {
		return ""
	}
	u, err := user.Current()
	if err != nil {
		return ""
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return u.Username
	}
	return u.Username + " " + g.Name
}

// haproxyCaps is what the installed HAProxy can serve besides plain HTTP.
type haproxyCaps struct {
	TLS bool // built with OpenSSL
	H2  bool // and with an HTTP/2 front-end mux
}

var (
	haproxyOpenSSL = regexp.MustCompile(`USE_OPENSSL=1|\+OPENSSL|Built with OpenSSL`)
	haproxyH2FE    = regexp.MustCompile(`(?m)^\s*h2 : mode=HTTP.*side=[A-Z|]*FE`)
)

// parseHAProxyCaps reads the output of `haproxy -vv`.
func parseHAProxyCaps(vv []byte) haproxyCaps {
	tls := haproxyOpenSSL.Match(vv)
	return haproxyCaps{TLS: tls, H2: tls && haproxyH2FE.Match(vv)}
}

// skipReason says why contestant c cannot run workload w here, or "" when
// it can.
func (b *bench) skipReason(c contestant, w workload) string {
	if c.tool != "haproxy" {
		return ""
	}
	switch {
	case w.cached() && c.cookie != "":
		return "its one backend picks the server after the cache lookup, so a cache there would not hold the branch, " +
			"and a hit is answered without a server, so without the Set-Cookie of a new session"
	case w.tls && !b.haproxy.TLS:
		return "this haproxy is built without OpenSSL (no TLS)"
	case w.h2 && !b.haproxy.H2:
		return "this haproxy has no HTTP/2 front-end"
	}
	return ""
}
