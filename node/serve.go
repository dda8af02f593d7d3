package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/fleet"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/web"
)

// Serve runs `dwara serve`: the REST API on AdminListen and the embedded
// proxy on Listen, the proxy following the newest generation in the
// database and applying each publish of the API before its 201. It runs
// until ctx is done or one of its parts fails, and returns once every part
// has stopped: nil after a graceful shutdown, else the first error (also
// when something fails to start). Several may run in one program on
// different addresses.
func Serve(ctx context.Context, c ServeConfig) error {
	c.defaults()
	if c.AdminListen == "" {
		c.AdminListen = DefaultAdminListen
	}
	log := c.Logger
	if c.ReadToken != "" && c.ReadToken == c.AdminToken {
		return errors.New("the read token equals the admin token: it would not be read-only")
	}
	for _, h := range c.AdminHosts {
		if err := api.CheckAllowedHost(h); err != nil {
			return fmt.Errorf("admin host %q: %w", h, err)
		}
	}
	if c.AdminToken == "" && !isLoopback(c.AdminListen) {
		return fmt.Errorf("admin listener %s is not loopback: set DWARA_ADMIN_TOKEN to expose the API beyond this machine", c.AdminListen)
	}

	store, err := c.openProcessStore(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	// Deferred calls run after g.Wait below: every goroutine has stopped
	// before the demo pools, the upstream connections and the store close.
	defer store.Close()
	if c.Demo {
		pools, err := startDemo(ctx, store)
		defer func() {
			for _, p := range pools {
				p.Close()
			}
		}()
		if err != nil {
			return err
		}
	}

	reg := newRegistry()
	px := proxy.New(c.proxyOptions(reg))
	defer px.Close()             // after every part has stopped: the pooled upstream connections
	var follower *fleet.Follower // set below, before any apply
	var lsn *db.Listener         // set below, before anything serves
	apply := applier(px, func(generation int64) {
		follower.Notify() // transient weights of the applied generation, if any
		if c.Applied != nil {
			c.Applied(generation)
		}
	})
	apiSrv := api.New(api.Options{
		// The API validated spec once; the proxy serves it before the 201.
		OnPublish: func(ctx context.Context, generation int64, spec *config.Spec) error {
			return apply(ctx, spec, generation)
		},
		Store:           store,
		Token:           c.AdminToken,
		ReadToken:       c.ReadToken,
		AllowedHosts:    c.AdminHosts,
		DatabaseTimeout: c.DatabaseTimeout,
		Logger:          log,
		Metrics:         metricsHandler(reg),
		// Ready once a generation is applied, and while publishes can reach
		// this process (its listener hears notifications).
		Ready: func() bool { return px.Generation() > 0 && (lsn == nil || !lsn.Deaf()) },
	})
	proxyL, err := listenProxy(c.Listen, px, c.Limits)
	if err != nil {
		return err
	}
	adminL, err := listenAdmin("admin", c.AdminListen, adminHandler(apiSrv.Handler()), c.Limits)
	if err != nil {
		closeAll(proxyL)
		return err
	}
	src := c.databaseSource(store, proxyL.addr(), px, apply)
	cp := c.canaryParts(store, src.Instance.ID, px, reg)
	follower = cp.follower
	l := listener(c.listenURL(store), log, follows(src), weights(follower), events(apiSrv))
	lsn = l

	g, gctx := errgroup.WithContext(ctx)
	if err := c.serveTLS(gctx, g, proxyL, adminL); err != nil {
		closeAll(proxyL, adminL)
		return err
	}
	cp.run(gctx, g)
	g.Go(func() error { return l.Run(gctx) })
	g.Go(func() error { return src.Run(gctx) })
	g.Go(func() error { return apiSrv.Run(gctx) })
	serveHTTP(gctx, g, log, c.Limits.ShutdownTimeout, proxyL, adminL)
	if c.Started != nil {
		c.Started(Addrs{Proxy: proxyL.addr(), Admin: adminL.addr()})
	}
	return g.Wait()
}

// adminHandler is the admin listener's handler: the dashboard at "/" and
// its assets under "/ui/", everything else the API's.
func adminHandler(apiHandler http.Handler) http.Handler {
	dash := web.Dashboard()
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", dash)
	mux.Handle("GET /ui/", dash)
	mux.Handle("/", apiHandler)
	return mux
}

// Demo pool addresses: fixed, so that the seeded generation keeps pointing
// at them across restarts.
var (
	demoStable = []string{"127.0.0.1:9001", "127.0.0.1:9002"}
	demoCanary = []string{"127.0.0.1:9101"}
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

// startDemo starts the demo pools and, when the database holds no
// generation, publishes DemoSpec.
func startDemo(ctx context.Context, store *db.Store) ([]*demo.Pool, error) {
	stable, err := demo.StartPoolOn("web-stable", demoStable...)
	if err != nil {
		return nil, fmt.Errorf("demo: %w (the demo upstreams need ports 9001, 9002 and 9101 free)", err)
	}
	canary, err := demo.StartPoolOn("web-canary", demoCanary...)
	if err != nil {
		stable.Close()
		return nil, fmt.Errorf("demo: %w (the demo upstreams need ports 9001, 9002 and 9101 free)", err)
	}
	pools := []*demo.Pool{stable, canary}
	if _, err := store.Current(ctx); !errors.Is(err, db.ErrNotFound) {
		return pools, err // nil when a generation exists: nothing to seed
	}
	spec, err := config.Parse([]byte(DemoSpec(demoStable, demoCanary)))
	if err != nil {
		return pools, fmt.Errorf("demo spec: %w", err)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		return pools, err
	}
	zero := int64(0)
	_, err = store.Publish(ctx, db.PublishParams{
		Spec: js, Action: apiv1.ActionCreate, Author: "demo",
		Message: "demo: web, a sticky 90/10 split; shop, a 90/10 canary judged by the controller", IfMatch: &zero,
	})
	if errors.Is(err, db.ErrPreconditionFailed) {
		err = nil // another process seeded first
	}
	return pools, err
}
