package node

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/fleet"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/source"
)

// Gateway runs `dwara gateway`: a data plane on Listen with /metrics,
// /healthz and /readyz on MetricsListen. With ConfigFile it serves that file
// and reloads it on change or on Reload; with ControlPlane it follows the
// API of `serve` at that URL (source.ControlPlane), reports itself and
// posts its canary windows there, with no database of its own; otherwise
// it follows the newest generation in the database at DatabaseURL, as a
// replica of `serve`. It
// runs until ctx is done or one of its parts fails (a first spec file that
// is refused, for one), and returns once every part has stopped: nil after a
// graceful shutdown, else the first error. Several may run in one program
// on different addresses.
func Gateway(ctx context.Context, c GatewayConfig) error {
	c.defaults()
	if c.MetricsListen == "" {
		c.MetricsListen = DefaultMetricsListen
	}
	log := c.Logger

	var store *db.Store
	if c.ConfigFile == "" && c.ControlPlane == "" {
		// A replica never migrates (serve or `dwara migrate` does), nor
		// needs PostgreSQL to answer to start: the pool connects lazily.
		var err error
		if store, err = c.openReplicaStore(c.DatabaseURL); err != nil {
			return err
		}
		// Runs after g.Wait below, once every goroutine has stopped.
		defer store.Close()
	}
	var state *stateDir
	if c.ConfigFile == "" {
		var err error
		if state, err = newStateDir(c.StateDir, log); err != nil {
			// A read-only file system, say: the gateway serves all the
			// same, only not from a saved generation after a restart.
			log.Warn("no state directory: the last generation will not be kept across restarts", "dir", c.StateDir, "err", err)
		}
	}

	reg := newRegistry(c.Version)
	px := proxy.New(c.proxyOptions(reg))
	defer px.Close()             // after every part has stopped: the pooled upstream connections
	var follower *fleet.Follower // with a database: set below, before any apply
	var brake *fleet.Brake       // with a database or a control plane: set below, before any apply
	// The proxy listener accepts its first connection only once a
	// generation is applied (from the state directory or the source), so
	// no client of a starting gateway is answered "no generation".
	ready := make(chan struct{})
	markReady := sync.OnceFunc(func() { close(ready) })
	apply := applier(px, func(spec *config.Spec, generation int64) {
		markReady()
		state.save(spec, generation)
		if brake != nil {
			brake.Serving(spec, generation)
		}
		if follower != nil {
			follower.Notify() // transient weights of the applied generation, if any
		}
		if c.Applied != nil {
			c.Applied(generation)
		}
	})
	// The last-known generation serves at once; the source's own applies
	// only when newer.
	var saved *config.Spec // the state directory's generation, served from the start
	var savedGen int64
	if spec, generation, weights, err := state.load(); err != nil {
		log.Warn("the state directory's last generation was not served", "err", err)
	} else if spec != nil {
		if _, err := px.ApplyNewer(spec, generation); err != nil {
			log.Warn("the state directory's last generation was not served", "generation", generation, "err", err)
		} else {
			for svc, w := range weights {
				if _, err := px.SetCanaryWeight(generation, svc, w); err != nil {
					log.Warn("the state directory's canary weight was not set", "generation", generation, "service", svc, "err", err)
				}
			}
			log.Info("serving the last generation from the state directory until the source answers", "generation", generation, "dir", c.StateDir)
			saved, savedGen = spec, generation
			markReady()
		}
	}
	kept := keptWeights{px: px, state: state}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(reg))
	if c.Profile {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(struct {
			Status     string `json:"status"`
			Generation int64  `json:"generation"`
			Version    string `json:"version,omitempty"`
		}{"ok", px.Generation(), c.Version})
	})
	var lsn *db.Listener // with a database: set below, before anything serves
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		gen := px.Generation()
		switch {
		case gen == 0:
			writeStatus(w, http.StatusServiceUnavailable, "no generation applied", 0)
		case lsn != nil && lsn.Deaf():
			writeStatus(w, http.StatusServiceUnavailable, "notifications do not reach this process (see the log)", gen)
		default:
			writeStatus(w, http.StatusOK, "ready", gen)
		}
	})

	certs, err := c.certificates()
	if err != nil {
		return err
	}
	proxyL, err := listenFront(c.Front, c.HTTP2, c.Listen, px, c.Limits, certs.config(), log)
	if err != nil {
		return err
	}
	proxyL.ready = ready
	// The metrics listener stays plain.
	metricsL, err := listenAdmin("metrics", c.MetricsListen, mux, c.Limits, nil)
	if err != nil {
		closeAll(proxyL)
		return err
	}

	g, gctx := errgroup.WithContext(ctx)
	certs.start(gctx, g, c.TLSReload)
	switch {
	case c.ConfigFile != "":
		src := &source.File{Path: c.ConfigFile, Apply: apply, Reload: c.Reload, Logger: log}
		g.Go(func() error { return src.Run(gctx) })
	case c.ControlPlane != "":
		// One client for the source and the flusher; its idle connections
		// are closed once every part has stopped.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		base := controlPlaneURL(c.ControlPlane)
		src := &source.ControlPlane{
			URL: base, Token: c.ControlPlaneToken, Instance: instance(proxyL.addr()),
			Apply: apply, Endpoints: px.Endpoints, Caches: resetHook{px, c.CachesReset},
			Heartbeat: c.Heartbeat, Resync: c.Resync, Client: hc, Logger: log,
		}
		// No canary runner: judging needs the database. The windows go to
		// the API, for the runner of a process that has one. The local
		// brake hears the runner as the control plane answering ready (its
		// database answers, and it runs a runner); it cannot record a
		// brake: it holds until the control plane's weight changes.
		brake = c.brake(controlPlaneReady(hc, base), nil, src.Instance.ID, kept, reg)
		src.Weights = brake.Guard(kept)
		flusher := &fleet.Flusher{
			Sink:     &fleet.APIWindowSink{URL: base, Token: c.ControlPlaneToken, Client: hc},
			Instance: src.Instance.ID, Recorders: px.CanaryRecorders, Interval: c.CanaryInterval, Logger: log,
			Local: brake,
		}
		g.Go(func() error { return src.Run(gctx) })
		g.Go(func() error { return flusher.Run(gctx) })
		g.Go(func() error { return brake.Run(gctx) })
	default:
		src := c.databaseSource(store, proxyL.addr(), px, apply)
		cp := c.canaryParts(store, src.Instance.ID, px, kept, reg)
		follower, brake = cp.follower, cp.brake
		l := listener(c.listenURL(store), log, follows(src), weights(follower), purges(resetHook{px, c.CachesReset}, log))
		lsn = l
		cp.run(gctx, g)
		g.Go(func() error { return l.Run(gctx) })
		g.Go(func() error { return src.Run(gctx) })
	}
	if brake != nil && saved != nil {
		brake.Serving(saved, savedGen)
	}
	serveHTTP(gctx, g, log, c.Limits.ShutdownTimeout, proxyL, metricsL)
	if c.Started != nil {
		c.Started(Addrs{Proxy: proxyL.addr(), Metrics: metricsL.addr()})
	}
	return g.Wait()
}

// controlPlaneReady is the local brake's word from the runner of a
// gateway fed by the control plane at base: GET /readyz answers 200 (the
// control plane's database answers, and every control plane runs a
// canary runner).
func controlPlaneReady(hc *http.Client, base string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return false, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}
}

// controlPlaneURL is the base URL of the control plane's API: raw, with
// "http://" when it has no scheme, without a trailing slash.
func controlPlaneURL(raw string) string {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	return strings.TrimSuffix(raw, "/")
}

func writeStatus(w http.ResponseWriter, code int, status string, generation int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "generation": generation})
}
