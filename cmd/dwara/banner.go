package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/node"
)

// bannerInfo is what the banner of `dwara serve` tells: where everything
// is, which generation is active and, with --demo, what to try on it.
type bannerInfo struct {
	node.Addrs
	// TLS: the listeners serve https.
	TLS bool
	// Demo: the demo pools run, web-stable at DemoStable and web-canary at
	// DemoCanary (node.DemoPorts.Addrs).
	Demo                   bool
	DemoStable, DemoCanary []string
	// CLI is how to run a client verb against this server: the program and,
	// when the API is not at the client's default URL, --api URL.
	CLI cliInvocation
	// Token: the API needs the admin token.
	Token bool
	// Active is the active generation; nil when none is published.
	Active *activeGeneration
	// Err, when not nil, is why Active could not be read.
	Err error
}

// activeGeneration is what the banner shows of the active generation.
type activeGeneration struct {
	ID             int64
	Action, Author string
	Spec           bannerSpec
}

// bannerSpec is the part of a generation's spec the banner reads (the
// binary's own packages do not include gateway/config).
type bannerSpec struct {
	Upstreams []struct {
		Name      string   `json:"name"`
		Endpoints []string `json:"endpoints"`
	} `json:"upstreams"`
	Services []bannerService `json:"services"`
}

// bannerService is one service of a bannerSpec.
type bannerService struct {
	Name     string `json:"name"`
	BasePath string `json:"base_path"`
	Host     string `json:"host"`
	Upstream string `json:"upstream"`
	Split    *struct {
		Targets []struct {
			Upstream string `json:"upstream"`
			Weight   int    `json:"weight"`
		} `json:"targets"`
		CanaryAnalysis *struct {
			Enabled bool `json:"enabled"`
		} `json:"canary_analysis"`
	} `json:"split"`
	Sticky *struct {
		Cookie string `json:"cookie"`
	} `json:"sticky"`
}

// upstreams returns the names of the upstreams s routes to.
func (s bannerService) upstreams() []string {
	if s.Split == nil {
		return []string{s.Upstream}
	}
	var names []string
	for _, t := range s.Split.Targets {
		names = append(names, t.Upstream)
	}
	return names
}

// canaryGroup reports whether s is a canary group the controller acts on.
func (s bannerService) canaryGroup() bool {
	return s.Split != nil && len(s.Split.Targets) == 2 && s.Split.CanaryAnalysis != nil && s.Split.CanaryAnalysis.Enabled
}

// routing describes where s sends requests: "web-stable 90 / web-canary 10,
// sticky, canary analysis".
func (s bannerService) routing() string {
	var parts []string
	if s.Split == nil {
		parts = append(parts, s.Upstream)
	} else {
		var ts []string
		for _, t := range s.Split.Targets {
			ts = append(ts, t.Upstream+" "+strconv.Itoa(t.Weight))
		}
		parts = append(parts, strings.Join(ts, " / "))
	}
	if s.Sticky != nil {
		parts = append(parts, "sticky")
	}
	if s.canaryGroup() {
		parts = append(parts, "canary analysis")
	}
	return strings.Join(parts, ", ")
}

// endpoints returns the endpoints of upstream name in spec.
func (spec bannerSpec) endpoints(name string) []string {
	for _, u := range spec.Upstreams {
		if u.Name == name {
			return u.Endpoints
		}
	}
	return nil
}

// onDemo reports whether s routes to a demo pool of b.
func (b bannerInfo) onDemo(s bannerService) bool {
	for _, u := range s.upstreams() {
		for _, e := range b.Active.Spec.endpoints(u) {
			if slices.Contains(b.DemoStable, e) || slices.Contains(b.DemoCanary, e) {
				return true
			}
		}
	}
	return false
}

// cliInvocation is how to run a client verb against the server.
type cliInvocation struct {
	program string // "./bin/dwara", or "dwara" when it was found on $PATH
	api     string // " --api URL", or "" for the client's default URL
}

// line is the command line of a client verb with args.
func (c cliInvocation) line(args ...string) string {
	return c.program + " " + strings.Join(args, " ") + c.api
}

// cliCommand returns how to run a client verb of the program started as
// arg0 against the admin listener bound at admin.
func cliCommand(arg0, admin string, tls bool) cliInvocation {
	c := cliInvocation{program: "dwara"}
	if strings.Contains(arg0, "/") {
		c.program = arg0
	}
	if u := baseURL(admin, tls); u != "http://127.0.0.1:9090" {
		c.api = " --api " + u
	}
	return c
}

// baseURL is the URL of a listener bound at addr, as a client on this
// machine reaches it: an unspecified host (all interfaces) is 127.0.0.1.
func baseURL(addr string, tls bool) string {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return scheme + "://" + addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// loadActive reads the active generation of the database at url; nil when
// none is published.
func loadActive(ctx context.Context, url string) (*activeGeneration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	store, err := db.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	defer store.Close()
	g, err := store.Current(ctx)
	if errors.Is(err, db.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	a := &activeGeneration{ID: g.ID, Action: g.Action, Author: g.Author}
	if err := json.Unmarshal(g.Spec, &a.Spec); err != nil {
		return nil, fmt.Errorf("decode the spec of generation %d: %w", g.ID, err)
	}
	return a, nil
}

// banner tells a newcomer where everything is, what the active generation
// routes and, with the demo, commands that work on that generation.
func banner(w io.Writer, b bannerInfo) {
	proxy, admin := baseURL(b.Proxy, b.TLS), baseURL(b.Admin, b.TLS)
	fmt.Fprintf(w, `
  dwara is running
    proxy      %[1]s/
    dashboard  %[2]s/
    API        %[2]s/api/v1/generations
    API docs   %[2]s/docs
    metrics    %[2]s/metrics
`, proxy, admin)
	fmt.Fprintln(w)
	switch {
	case b.Err != nil:
		fmt.Fprintf(w, "  the active generation could not be read: %v\n", b.Err)
	case b.Active == nil:
		fmt.Fprintf(w, "  no generation yet: publish a spec with %s\n", b.CLI.line("apply", "-f", "spec.yaml"))
	default:
		a := b.Active
		fmt.Fprintf(w, "  generation %d is active (%s by %s):\n", a.ID, a.Action, a.Author)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, s := range a.Spec.Services {
			where := s.BasePath
			if s.Host != "" {
				where = s.Host + where
			}
			fmt.Fprintf(tw, "    %s\t%s\t%s\n", s.Name, where, s.routing())
		}
		tw.Flush()
	}
	if b.Demo {
		fmt.Fprintf(w, "  demo pools: web-stable (%s) and web-canary (%s)\n", strings.Join(b.DemoStable, ", "), strings.Join(b.DemoCanary, ", "))
		demoTries(w, b, proxy)
	}
	fmt.Fprintln(w)
}

// demoTries prints the commands to try on the active generation, only
// those that work on it: a request to the first service on the demo pools,
// a flip of the first 2-target split that no canary controller holds, and
// a canary failure run on the first canary group whose canary is the demo's
// canary pool. When no service routes to the demo pools it says how to
// publish the demo spec again.
func demoTries(w io.Writer, b bannerInfo, proxy string) {
	if b.Active == nil {
		return
	}
	spec := b.Active.Spec
	type try struct {
		why  string
		cmds []string
	}
	var tries []try
	for _, s := range spec.Services {
		if !b.onDemo(s) {
			continue
		}
		cmd := "curl -si " + proxy + strings.TrimSuffix(s.BasePath, "/") + "/"
		if s.Host != "" {
			cmd += " -H 'Host: " + s.Host + "'"
		}
		why := s.Name + ": a page naming the pool that served it"
		if s.Sticky != nil {
			why = s.Name + ": a new sticky session each time (-c jar -b jar keeps one)"
		}
		tries = append(tries, try{why, []string{cmd}})
		break
	}
	for _, s := range spec.Services {
		if s.Split == nil || len(s.Split.Targets) != 2 || s.canaryGroup() {
			continue
		}
		t := s.Split.Targets
		tries = append(tries, try{fmt.Sprintf("%s: blue-green, %d/%d -> %d/%d", s.Name, t[0].Weight, t[1].Weight, t[1].Weight, t[0].Weight),
			[]string{b.CLI.line("flip", s.Name)}})
		break
	}
	for _, s := range spec.Services {
		if !s.canaryGroup() || len(b.DemoCanary) == 0 || !slices.Contains(spec.endpoints(s.Split.Targets[1].Upstream), b.DemoCanary[0]) {
			continue
		}
		tries = append(tries, try{s.Name + ": make the canary pool fail 20%, send traffic: the controller rolls it back within a minute",
			[]string{
				"curl -s -X POST 'http://" + b.DemoCanary[0] + "/fail?rate=0.2'",
				"for i in $(seq 600); do curl -so /dev/null " + proxy + strings.TrimSuffix(s.BasePath, "/") + "/; sleep 0.05; done",
				b.CLI.line("canary", s.Name),
				"curl -s -X POST 'http://" + b.DemoCanary[0] + "/fail?rate=0'    # heal it",
			}})
		break
	}
	if !slices.ContainsFunc(spec.Services, b.onDemo) {
		fmt.Fprintf(w, "    no service of generation %d routes to them; to start the demo afresh, restart with\n", b.Active.ID)
		fmt.Fprintln(w, "    --demo --reset (make demo-reset): it publishes the demo spec as a new generation")
	}
	if len(tries) == 0 {
		return
	}
	fmt.Fprintln(w, "  try:")
	for _, t := range tries {
		fmt.Fprintf(w, "    # %s\n", t.why)
		for _, c := range t.cmds {
			fmt.Fprintf(w, "    %s\n", c)
		}
	}
	if b.Token {
		fmt.Fprintln(w, "    # the client verbs send $DWARA_ADMIN_TOKEN: set it to the admin token")
	}
}
