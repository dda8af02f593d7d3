package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
)

// The demo of `dwara serve --demo`: two small upstream pools on fixed ports
// and an example generation over them.

// DefaultDemoPorts are the demo pools' ports: web-stable's two, then
// web-canary's. They are fixed by default, so that the seeded generation
// keeps pointing at them across restarts; `serve --demo-ports` moves them.
var DefaultDemoPorts = DemoPorts{9001, 9002, 9101}

// DemoPorts are the ports of the demo pools: web-stable's two, then
// web-canary's. The zero value means DefaultDemoPorts.
type DemoPorts [3]int

// orDefault returns p, or DefaultDemoPorts for the zero value.
func (p DemoPorts) orDefault() DemoPorts {
	if p == (DemoPorts{}) {
		return DefaultDemoPorts
	}
	return p
}

// Addrs returns the demo pools' addresses on 127.0.0.1, as the demo spec
// names them: web-stable's and web-canary's.
func (p DemoPorts) Addrs() (stable, canary []string) {
	p = p.orDefault()
	at := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
	return []string{at(p[0]), at(p[1])}, []string{at(p[2])}
}

// String is the ports as --demo-ports takes them: "9001,9002,9101".
func (p DemoPorts) String() string {
	p = p.orDefault()
	return fmt.Sprintf("%d,%d,%d", p[0], p[1], p[2])
}

// ParseDemoPorts parses --demo-ports: three distinct ports 1..65535,
// comma-separated (web-stable's two, then web-canary's).
func ParseDemoPorts(v string) (DemoPorts, error) {
	parts := strings.Split(v, ",")
	if len(parts) != 3 {
		return DemoPorts{}, fmt.Errorf("want three ports, web-stable's two then web-canary's (e.g. %s), not %q", DefaultDemoPorts, v)
	}
	var p DemoPorts
	for i, s := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 65535 {
			return DemoPorts{}, fmt.Errorf("%q is not a port (1..65535)", s)
		}
		if slices.Contains(p[:i], n) {
			return DemoPorts{}, fmt.Errorf("port %d is given twice", n)
		}
		p[i] = n
	}
	return p, nil
}

// DemoAuthor is the author of the generations the demo publishes.
const DemoAuthor = "demo"

// Messages of the generations the demo publishes.
const (
	demoSeedMessage  = "demo: web, a sticky 90/10 split; shop, a 90/10 canary judged by the controller"
	demoResetMessage = "demo reset: " + demoSeedMessage
)

// DemoSpec is the example generation `serve --demo` seeds: service web, a
// 90/10 split of web-stable and web-canary with a sticky cookie, and
// service shop under /shop, a 90/10 split of the same pools judged by the
// canary controller (promoted by 10 while the canary's error rate stays
// under 1%, rolled back above 5%, straight to 0 above 10%).
func DemoSpec(stable, canary []string) string {
	q := func(addrs []string) string {
		b, _ := json.Marshal(addrs)
		return string(b)
	}
	return `upstreams:
  - name: web-stable
    endpoints: ` + q(stable) + `
  - name: web-canary
    endpoints: ` + q(canary) + `
services:
  - name: web
    base_path: /
    split:
      targets:
        - {upstream: web-stable, weight: 90}
        - {upstream: web-canary, weight: 10}
    sticky:
      cookie: dwara_affinity
      ttl_s: 3600
  - name: shop
    base_path: /shop
    split:
      targets:
        - {upstream: web-stable, weight: 90}
        - {upstream: web-canary, weight: 10}
      canary_analysis:
        enabled: true
        window_seconds: 30
        step: 10
        min_requests: 50
        cooldown_seconds: 10
        promote: {metric: error_rate, threshold: 0.01}
        rollback: {metric: error_rate, threshold: 0.05}
`
}

// demoBindHost is the host the demo pools bind when the proxy listens on
// listen: all interfaces when the proxy listens on all interfaces (in a
// container, so that a published port reaches a pool's POST /fail), else
// 127.0.0.1. The demo spec names them on 127.0.0.1 either way, which the
// proxy reaches in both cases.
func demoBindHost(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return host
	}
	return "127.0.0.1"
}

// onHost returns addrs (host:port) with their host replaced by host.
func onHost(addrs []string, host string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		_, port, _ := net.SplitHostPort(a)
		out[i] = net.JoinHostPort(host, port)
	}
	return out
}

// startDemo starts the demo pools on their fixed ports, bound as
// demoBindHost says for a proxy on listen, and, when the database holds no
// generation, publishes DemoSpec.
func startDemo(ctx context.Context, store *db.Store, listen string, ports DemoPorts) ([]*demo.Pool, error) {
	host := demoBindHost(listen)
	stable, canary := ports.Addrs()
	pools, err := startDemoOn(ctx, store, onHost(stable, host), onHost(canary, host), ports)
	return pools, err
}

// startDemoOn starts web-stable on the addresses stable and web-canary on
// canary (host:port; port 0 picks a free one) and, when the database holds
// no generation, publishes DemoSpec over the addresses they bound (an
// unspecified host named as 127.0.0.1). The pools are returned even with an
// error, for the caller to close.
func startDemoOn(ctx context.Context, store *db.Store, stable, canary []string, ports DemoPorts) ([]*demo.Pool, error) {
	hint := fmt.Sprintf(" (the demo upstreams need ports %s free; move them with --demo-ports, e.g. --demo-ports 19001,19002,19101)", ports)
	sp, err := demo.StartPoolOn("web-stable", stable...)
	if err != nil {
		return nil, fmt.Errorf("demo: %w%s", err, hint)
	}
	cp, err := demo.StartPoolOn("web-canary", canary...)
	if err != nil {
		sp.Close()
		return nil, fmt.Errorf("demo: %w%s", err, hint)
	}
	pools := []*demo.Pool{sp, cp}
	if _, err := store.Current(ctx); !errors.Is(err, db.ErrNotFound) {
		return pools, err // nil when a generation exists: nothing to seed
	}
	zero := int64(0)
	_, err = publishDemo(ctx, store, reachable(sp.Addrs), reachable(cp.Addrs), &zero, demoSeedMessage)
	if errors.Is(err, db.ErrPreconditionFailed) {
		err = nil // another process seeded first
	}
	return pools, err
}

// reachable returns the bound addresses addrs as an endpoint names them:
// an unspecified host (all interfaces) becomes 127.0.0.1.
func reachable(addrs []string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		out[i] = net.JoinHostPort(host, port)
	}
	return out
}

// publishDemo publishes DemoSpec over stable and canary as a generation of
// DemoAuthor with message, only on top of generation *ifMatch when ifMatch
// is non-nil.
func publishDemo(ctx context.Context, store *db.Store, stable, canary []string, ifMatch *int64, message string) (apiv1.Generation, error) {
	spec, err := config.Parse([]byte(DemoSpec(stable, canary)))
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("demo spec: %w", err)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return apiv1.Generation{}, err
	}
	return store.Publish(ctx, db.PublishParams{
		Spec: js, Action: apiv1.ActionCreate, Author: DemoAuthor, Message: message, IfMatch: ifMatch,
		CanaryKeys: config.CanaryKeys(spec),
	})
}

// ResetDemo publishes the demo's spec (DemoSpec over the demo pools'
// addresses on ports) as a new generation of the database at databaseURL, which is
// created and migrated when needed, whatever generation is active: `dwara
// serve --demo --reset` starts the demo afresh. Every earlier generation
// stays in the history. When the active generation already has the demo's
// spec nothing is stored, and it is returned with Unchanged set. A running
// `dwara serve` on the same database applies the new generation as any
// other.
func ResetDemo(ctx context.Context, databaseURL string, ports DemoPorts) (apiv1.Generation, error) {
	store, err := openStore(ctx, databaseURL)
	if err != nil {
		return apiv1.Generation{}, err
	}
	defer store.Close()
	stable, canary := ports.Addrs()
	g, err := publishDemo(ctx, store, stable, canary, nil, demoResetMessage)
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("demo reset: %w", err)
	}
	return g, nil
}
