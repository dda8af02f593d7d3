package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"golang.org/x/sync/errgroup"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
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
		pools, err := startDemo(ctx, store, c.Listen, c.DemoPorts)
		defer func() {
			for _, p := range pools {
				p.Close()
			}
		}()
		if err != nil {
			return err
		}
	}

	reg := newRegistry(c.Version)
	px := proxy.New(c.proxyOptions(reg))
	defer px.Close()             // after every part has stopped: the pooled upstream connections
	var follower *fleet.Follower // set below, before any apply
	var brake *fleet.Brake       // set below, before any apply
	var lsn *db.Listener         // set below, before anything serves
	apply := applier(px, func(spec *config.Spec, generation int64) {
		brake.Serving(spec, generation)
		follower.Notify() // transient weights of the applied generation, if any
		if c.Applied != nil {
			c.Applied(generation)
		}
	})
	apiSrv := api.New(api.Options{
		Version: c.Version,
		// The API validated spec once; the proxy serves it before the 201,
		// with the weights in force of the canaries it carries over.
		OnPublish: func(ctx context.Context, generation int64, spec *config.Spec) error {
			spec, err := fleet.Overlay(ctx, store, spec, generation)
			if err != nil {
				return err // the database source applies it, overlaid, when it can
			}
			return apply(ctx, spec, generation)
		},
		// A purge empties this process's embedded proxy at once, then is
		// announced to the other gateways (db.CacheNotifyChannel), whose
		// listeners (purges) and event streams act on it.
		PurgeCache: func(service, pathPrefix string) int {
			n, _ := px.PurgeCache(service, pathPrefix)
			return n
		},
		CacheStats: func(service string) (apiv1.CacheStats, bool) {
			st, ok := px.CacheStats(service)
			return apiv1.CacheStats{Entries: st.Entries, Bytes: st.Bytes, MaxBytes: st.MaxBytes,
				Hits: st.Hits, Misses: st.Misses, Revalidated: st.Revalidated, Bypassed: st.Bypassed}, ok
		},
		Store:            store,
		Token:            c.AdminToken,
		ReadToken:        c.ReadToken,
		AllowedHosts:     c.AdminHosts,
		DatabaseTimeout:  c.DatabaseTimeout,
		GatewayRetention: c.GatewayRetention,
		Logger:           log,
		Metrics:          metricsHandler(reg),
		Registerer:       reg,
		// Ready once a generation is applied, and while publishes can reach
		// this process (its listener hears notifications).
		Ready: func() bool { return px.Generation() > 0 && (lsn == nil || !lsn.Deaf()) },
	})
	certs, err := c.certificates()
	if err != nil {
		return err
	}
	proxyL, err := listenFront(c.Front, c.HTTP2, c.Listen, px, c.Limits, certs.config(), log)
	if err != nil {
		return err
	}
	adminL, err := listenAdmin("admin", c.AdminListen, adminHandler(apiSrv.Handler()), c.Limits, certs.config())
	if err != nil {
		closeAll(proxyL)
		return err
	}
	src := c.databaseSource(store, proxyL.addr(), px, apply)
	cp := c.canaryParts(store, src.Instance.ID, px, px, reg)
	follower, brake = cp.follower, cp.brake
	l := listener(c.listenURL(store), log, follows(src), weights(follower), events(apiSrv), purges(resetHook{px, c.CachesReset}, log))
	lsn = l

	g, gctx := errgroup.WithContext(ctx)
	certs.start(gctx, g, c.TLSReload)
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
