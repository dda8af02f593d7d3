package node

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/filesource"
	"github.com/dwara/dwara/gateway/proxy"
)

// Gateway runs `dwara gateway`: a data plane on Listen with /metrics,
// /healthz and /readyz on MetricsListen. With ConfigFile it serves that file
// and reloads it on change or on Reload; otherwise it follows the newest
// generation in the database at DatabaseURL, as a replica of `serve`.
func Gateway(ctx context.Context, c Config) error {
	c.defaults()
	log := c.Logger
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	reg := newRegistry()
	px := proxy.New(proxy.Options{Metrics: reg, Logger: log})
	ready := func() bool { return px.Generation() > 0 }

	var run func(ctx context.Context, proxyAddr string) error
	if c.ConfigFile != "" {
		src := &filesource.Source{Path: c.ConfigFile, Apply: px.Apply, Reload: c.Reload, Logger: log}
		run = func(ctx context.Context, _ string) error { return src.Run(ctx) }
	} else {
		store, err := openStore(ctx, c.DatabaseURL)
		if err != nil {
			return err
		}
		defer store.Close()
		run = func(ctx context.Context, proxyAddr string) error {
			sub := &db.Subscriber{
				Store:     store,
				Instance:  instance(proxyAddr),
				Apply:     ApplyGeneration(px, c.Applied),
				Heartbeat: c.Heartbeat,
				Resync:    c.Resync,
				Logger:    log,
			}
			return sub.Run(ctx)
		}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler(reg))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, "ok", px.Generation())
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			writeStatus(w, http.StatusServiceUnavailable, "no generation applied", 0)
			return
		}
		writeStatus(w, http.StatusOK, "ready", px.Generation())
	})

	proxyL, err := listen("proxy", c.Listen, px)
	if err != nil {
		return err
	}
	metricsL, err := listen("metrics", c.MetricsListen, mux)
	if err != nil {
		proxyL.ln.Close()
		return err
	}
	runErr := make(chan error, 1)
	go func() {
		err := run(ctx, proxyL.addr())
		runErr <- err
		if err != nil {
			cancel() // nothing to serve by: stop the listeners too
		}
	}()
	if c.Started != nil {
		c.Started(Addrs{Proxy: proxyL.addr(), Metrics: metricsL.addr()})
	}
	err = serveAll(ctx, log, proxyL, metricsL)
	cancel()
	if rerr := <-runErr; rerr != nil {
		return rerr
	}
	return err
}

func writeStatus(w http.ResponseWriter, code int, status string, generation int64) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "generation": generation})
}
