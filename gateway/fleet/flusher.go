// Package fleet is the fleet-wide side of the canary analysis, the parts
// that talk to PostgreSQL:
//
//   - Flusher: every data-plane process (serve's embedded proxy and every
//     gateway replica) writes its canary groups' per-second aggregates to
//     canary_windows about once a second, through a WindowSink: the store,
//     or for a `gateway --control-plane` replica the API (APIWindowSink).
//   - Runner: exactly one process of the fleet holds the runner's advisory
//     lock; every second it judges each canary group of the newest
//     generation on the union of every instance's windows
//     (gateway/canary.Evaluate), and records each action in
//     canary_events, announced on db.CanaryNotifyChannel. Any process with
//     a database URL runs one; the others wait for the lock.
//   - Follower: every data-plane process applies the transient weights of
//     the generation it serves, on every announcement, every (re)connect
//     and every apply; Overlay gives a generation being applied the
//     weights in force for it, so the first request already has them.
//
// The transient weights of a generation are the newest action's in
// canary_events; publishing a generation reverts them (the new generation
// has none) and starts its windows empty (windows are per generation).
package fleet

import (
	"context"
	"log/slog"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/proxy"
)

// DefaultFlushInterval is how often a Flusher writes its aggregates.
const DefaultFlushInterval = time.Second

// opTimeout bounds each round trip of the fleet's parts to PostgreSQL, so
// a hung database delays them, never blocks them for good.
const opTimeout = 10 * time.Second

// Recorders is what a Flusher reads of a data plane: the generation being
// served and its canary groups' recorders (proxy.Proxy.CanaryRecorders).
type Recorders func() (int64, []proxy.CanaryRecorders)

// WindowSink receives a data-plane process's canary windows: a *db.Store
// writes them to canary_windows; an APIWindowSink posts them to the
// control plane's API, which writes them there.
type WindowSink interface {
	FlushCanaryWindows(ctx context.Context, instance string, rows []db.CanaryWindowRow) error
}

var _ WindowSink = (*db.Store)(nil)

// Flusher writes one data-plane process's canary windows to its Sink.
// Set the fields, then call Run once. What a flush could not write (the
// database or the API away) is kept and added to the next flush, as long as the
// generation is still served; nothing is kept beyond one aggregate per
// group and version.
type Flusher struct {
	// Sink receives the windows (a *db.Store or an *APIWindowSink).
	// Required.
	Sink WindowSink
	// Instance is the process's gateway instance id. Required.
	Instance string
	// Recorders reads the data plane. Required.
	Recorders Recorders
	// Interval is the time between flushes; 0 means DefaultFlushInterval.
	Interval time.Duration
	// Logger logs failed flushes; nil means slog.Default().
	Logger *slog.Logger
	// Flushed, when non-nil, is called after each flush that wrote rows
	// (tests wait on it).
	Flushed func()
	// Local, when non-nil, is given every delta of every group's
	// recorders (this process's own window, e.g. a *Brake's), and while
	// its Holding is true nothing is written: the deltas are kept for a
	// later flush.
	Local LocalWindows

	pending map[pendingKey]*canary.Stats
	delta   [2]canary.Stats
}

// LocalWindows is what a Flusher feeds besides its Sink: a process's own
// windows (a *Brake).
type LocalWindows interface {
	// Observe is given generation's deltas of service's baseline and
	// canary; it must not keep the pointers.
	Observe(generation int64, service string, baseline, canary *canary.Stats)
	// Holding reports whether the flush must wait.
	Holding() bool
}

type pendingKey struct {
	generation int64
	service    string
	version    string
}

// Run flushes every Interval until ctx is done, then flushes once more
// (bounded by a second) and returns nil.
func (f *Flusher) Run(ctx context.Context) error {
	if f.Interval <= 0 {
		f.Interval = DefaultFlushInterval
	}
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	f.pending = make(map[pendingKey]*canary.Stats)
	tick := time.NewTicker(f.Interval)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = f.flush(fctx)
			cancel()
			return nil
		case <-tick.C:
		}
		fctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := f.flush(fctx)
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			log.Warn("canary windows not flushed; keeping them for the next flush", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("canary windows flushed again")
			failing = false
		}
	}
}

// flush adds the recorders' deltas to the pending aggregates of the
// generation served and writes them; on success they are cleared.
func (f *Flusher) flush(ctx context.Context) error {
	gen, recs := f.Recorders()
	for k := range f.pending {
		if k.generation != gen {
			delete(f.pending, k) // a generation no longer served: its windows no longer count
		}
	}
	for _, r := range recs {
		if f.Local == nil {
			r.Baseline.Delta(f.stats(gen, r.Service, db.VersionBaseline))
			r.Canary.Delta(f.stats(gen, r.Service, db.VersionCanary))
			continue
		}
		b, c := &f.delta[0], &f.delta[1]
		b.Reset()
		c.Reset()
		r.Baseline.Delta(b)
		r.Canary.Delta(c)
		f.stats(gen, r.Service, db.VersionBaseline).Add(b)
		f.stats(gen, r.Service, db.VersionCanary).Add(c)
		f.Local.Observe(gen, r.Service, b, c)
	}
	if f.Local != nil && f.Local.Holding() {
		return nil // kept for the next flush
	}
	var rows []db.CanaryWindowRow
	for k, s := range f.pending {
		if s.Requests == 0 {
			continue
		}
		rows = append(rows, db.CanaryWindowRow{
			Generation: k.generation, Service: k.service, Version: k.version,
			Requests: s.Requests, Errors: s.Errors, Latency: s.AppendSparse(nil),
		})
	}
	if len(rows) == 0 {
		return nil
	}
	if err := f.Sink.FlushCanaryWindows(ctx, f.Instance, rows); err != nil {
		return err
	}
	for _, s := range f.pending {
		s.Reset()
	}
	if f.Flushed != nil {
		f.Flushed()
	}
	return nil
}

func (f *Flusher) stats(gen int64, service, version string) *canary.Stats {
	k := pendingKey{gen, service, version}
	s := f.pending[k]
	if s == nil {
		s = new(canary.Stats)
		f.pending[k] = s
	}
	return s
}
