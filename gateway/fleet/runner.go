package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
)

// Defaults of a Runner.
const (
	DefaultEvaluateInterval = time.Second
	DefaultLockRetry        = 2 * time.Second
	// WindowRetention is how long window rows are kept: the longest
	// window_seconds a spec may set, and a margin.
	WindowRetention = time.Duration(config.MaxWindowSeconds)*time.Second + 10*time.Minute
	pruneInterval   = time.Minute
)

// Runner is the fleet's one canary controller. Every process with a
// database URL may run one; the one that holds the runner's advisory lock
// (db.CanaryLock) acts, the others try again every LockRetry. A runner
// whose lock connection fails has lost the lock and tries to take it
// again; as every action is recorded on the lock's own session with a
// compare-and-set on the weight in force, a runner that lost the lock
// never records, and two runners never record the same change.
//
// Every Interval the holder judges each canary group of the newest
// generation on the fleet's windows and records what canary.Evaluate
// decides: a weight change, or a wait of the schedule (a hold starting or
// broken, a gate). Its clock is the database's: the windows, the cooldowns and the
// events share one. Set the fields, then call Run once.
type Runner struct {
	// Store is the database. Required.
	Store *db.Store
	// Instance is this process's instance id, recorded with each action.
	Instance string
	// Interval is the time between evaluations; 0 means
	// DefaultEvaluateInterval.
	Interval time.Duration
	// LockRetry is the time between attempts to take the lock; 0 means
	// DefaultLockRetry.
	LockRetry time.Duration
	// Lease is how long the holder's lease lasts unless renewed (it is
	// renewed every fifth of it); a runner that finds the lock held on an
	// expired lease ends the holder's session and takes over
	// (db.Store.TryCanaryLease). 0 means db.DefaultCanaryLease.
	Lease time.Duration
	// Metrics receives the controller's metrics; nil registers them
	// nowhere.
	// The counters dwara_canary_promotions_total and
	// dwara_canary_rollbacks_total of every group of the newest
	// generation exist at 0 in every runner, leading or not.
	Metrics prometheus.Registerer
	// Logger logs the lock changing hands and every action; nil means
	// slog.Default().
	Logger *slog.Logger
	// Acted, when non-nil, is called with every recorded action.
	Acted func(apiv1.CanaryEvent)
	// Leading, when non-nil, is called with true when the runner takes
	// the lock and false when it loses or releases it.
	Leading func(bool)

	m      runnerMetrics
	groups map[int64][]canary.Group // by generation; only the newest kept
}

type runnerMetrics struct {
	promotions, rollbacks *prometheus.CounterVec
	requests, errorRate   *prometheus.GaugeVec
	p99                   *prometheus.GaugeVec
	leader                prometheus.Gauge
}

func newRunnerMetrics(reg prometheus.Registerer) runnerMetrics {
	m := runnerMetrics{
		promotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_canary_promotions_total",
			Help: "Promotions the canary controller recorded while this process held the runner lock, by group (service).",
		}, []string{"group"}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_canary_rollbacks_total",
			Help: "Rollbacks (by step, or severe to 0) the canary controller recorded while this process held the runner lock, by group (service).",
		}, []string{"group"}),
		requests: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dwara_canary_window_requests",
			Help: "Requests in the fleet's window of each version (baseline, canary) of each canary group, as last judged by this process's runner.",
		}, []string{"group", "version"}),
		errorRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dwara_canary_window_error_rate",
			Help: "Error rate in the fleet's window of each version of each canary group, as last judged by this process's runner.",
		}, []string{"group", "version"}),
		p99: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dwara_canary_window_latency_p99_seconds",
			Help: "p99 latency in the fleet's window of each version of each canary group, as last judged by this process's runner.",
		}, []string{"group", "version"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dwara_canary_runner_leader",
			Help: "1 while this process holds the canary runner lock and acts, else 0.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.promotions, m.rollbacks, m.requests, m.errorRate, m.p99, m.leader)
	}
	return m
}

// Run takes the lock when it can and judges while it holds it, until ctx
// is done; then it releases the lock and returns nil.
func (r *Runner) Run(ctx context.Context) error {
	if r.Interval <= 0 {
		r.Interval = DefaultEvaluateInterval
	}
	if r.LockRetry <= 0 {
		r.LockRetry = DefaultLockRetry
	}
	if r.Lease <= 0 {
		r.Lease = db.DefaultCanaryLease
	}
	log := r.Logger
	if log == nil {
		log = slog.Default()
	}
	r.m = newRunnerMetrics(r.Metrics)
	r.groups = make(map[int64][]canary.Group)
	for {
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		lock, err := r.Store.TryCanaryLease(lctx, r.Instance, r.Lease)
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Debug("canary runner: lock not taken", "err", err)
		}
		if lock != nil {
			if lock.TookOver != 0 {
				log.Warn("canary runner: the holder's lease had expired (frozen or wedged): ended its session and took over",
					"instance", r.Instance, "ended_backend_pid", lock.TookOver)
			}
			log.Info("canary runner: holding the lock; this process judges the canary groups", "instance", r.Instance)
			r.lead(true)
			err := r.hold(ctx, lock, log)
			lock.Close(context.WithoutCancel(ctx))
			r.lead(false)
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("canary runner: lost the lock", "err", err)
		}
		r.prime(ctx, log)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.LockRetry):
		}
	}
}

func (r *Runner) lead(on bool) {
	if on {
		r.m.leader.Set(1)
	} else {
		r.m.leader.Set(0)
	}
	if r.Leading != nil {
		r.Leading(on)
	}
}

// hold evaluates every Interval while the lock's session works; it returns
// the error that ended it (nil when ctx is done).
func (r *Runner) hold(ctx context.Context, lock *db.CanaryLock, log *slog.Logger) error {
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	renew := time.NewTicker(r.Lease / 5)
	defer renew.Stop()
	hk := newHooks(ctx)
	defer hk.Close()
	// The event hooks get the events recorded from now on.
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	last, err := r.Store.LastCanaryEventID(lctx)
	cancel()
	if err != nil {
		return err
	}
	hk.lastEvent = last
	lastPrune := time.Time{}
	for {
		ectx, cancel := context.WithTimeout(ctx, opTimeout)
		err := r.evaluate(ectx, lock, log, hk)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if time.Since(lastPrune) >= pruneInterval {
			pctx, cancel := context.WithTimeout(ctx, opTimeout)
			n, err := r.Store.PruneCanaryWindows(pctx, WindowRetention)
			cancel()
			if err != nil {
				log.Warn("canary runner: windows not pruned", "err", err)
			} else if n > 0 {
				log.Debug("canary runner: pruned window rows", "rows", n)
			}
			lastPrune = time.Now()
		}
		if err := r.wait(ctx, lock, tick.C, renew.C); err != nil || ctx.Err() != nil {
			return err
		}
	}
}

// wait renews the lease on every renew until the next evaluation is due
// (next) or ctx is done; a failed renewal is returned: the lease, and so
// the lock, may be lost, and the holder must not act again.
func (r *Runner) wait(ctx context.Context, lock *db.CanaryLock, next, renew <-chan time.Time) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-next:
			return nil
		case <-renew:
			rctx, cancel := context.WithTimeout(ctx, r.Lease)
			err := lock.Renew(rctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				return err
			}
		}
	}
}

// evaluate judges every group of the newest generation once. An error of
// the lock's session is returned (the lock may be lost); an error of one
// group's window read is logged and that group skipped.
func (r *Runner) evaluate(ctx context.Context, lock *db.CanaryLock, log *slog.Logger, hk *hooks) error {
	r.hookResults(ctx, hk, log)
	gen, _, err := lock.Newest(ctx)
	if err != nil || gen == 0 {
		return err
	}
	groups, err := r.groupsOf(ctx, gen)
	if err != nil {
		log.Warn("canary runner: generation not loaded", "generation", gen, "err", err)
		return nil
	}
	hk.generation(gen)
	if len(groups) == 0 {
		return nil
	}
	states, err := lock.States(ctx, gen)
	if err != nil {
		return err
	}
	defer r.deliverEvents(ctx, hk, gen, groups, log)
	for _, g := range groups {
		if !g.Analysis.Enabled || g.ManagedBy != "" {
			continue
		}
		st := states[g.Service]
		s := canary.State{CanaryWeight: g.Configured, LastAction: st.LastAction, Paused: st.Paused,
			HoldSince: st.HoldSince, Gate: st.Gate, BreachSince: st.BreachSince}
		if st.Transient {
			s.CanaryWeight = st.Weight
		}
		window := time.Duration(g.Analysis.WindowSeconds) * time.Second
		base, can, now, err := r.Store.CanaryWindow(ctx, gen, g.Service, window)
		if err != nil {
			log.Warn("canary runner: window not read", "service", g.Service, "err", err)
			continue
		}
		var w canary.Window
		if err := fill(&w.Baseline, base); err != nil {
			log.Warn("canary runner: bad window", "service", g.Service, "err", err)
			continue
		}
		if err := fill(&w.Canary, can); err != nil {
			log.Warn("canary runner: bad window", "service", g.Service, "err", err)
			continue
		}
		r.gauges(g.Service, &w)
		a, ok := canary.Evaluate(now, g, s, &w)
		// The webhooks' bookkeeping keeps this process's clock, as their
		// calls do.
		if rb, failed := r.rolloutChecks(time.Now(), hk, gen, g, s); failed {
			a, ok = rb, true
		}
		if ok && a.Kind == apiv1.CanaryPromote && r.promotionWaits(time.Now(), hk, gen, g, s, st.Transient, log) {
			continue
		}
		if !ok || (a.Kind == apiv1.CanaryRollback && a.To == a.From) {
			continue
		}
		pv := a.PValue
		bf, cf := a.Baseline, a.Canary
		e, recorded, err := lock.Record(ctx, apiv1.CanaryEvent{
			GenerationID: gen, Service: g.Service, FromWeight: a.From, ToWeight: a.To,
			Action: a.Kind, Reason: a.Reason, Baseline: &bf, Canary: &cf, PValue: &pv,
			InstanceID: r.Instance, Rule: a.Rule, RuleFigures: a.RuleFigures,
		}, g.Configured)
		if err != nil {
			return err
		}
		if !recorded {
			continue // the state changed under the judgement: judge again next time
		}
		switch a.Kind {
		case apiv1.CanaryPromote:
			r.m.promotions.WithLabelValues(g.Service).Inc()
		case apiv1.CanaryRollback, apiv1.CanarySevereRollback:
			r.m.rollbacks.WithLabelValues(g.Service).Inc()
		}
		log.Info("canary "+a.Kind, "service", g.Service, "generation", gen,
			"from", a.From, "to", a.To, "rule", a.Rule, "reason", a.Reason, "p_value", a.PValue)
		if r.Acted != nil {
			r.Acted(e)
		}
	}
	return nil
}

// groupsOf returns the canary groups of generation, loading and decoding
// its spec once.
func (r *Runner) groupsOf(ctx context.Context, gen int64) ([]canary.Group, error) {
	if g, ok := r.groups[gen]; ok {
		return g, nil
	}
	stored, err := r.Store.Get(ctx, gen)
	if err != nil {
		return nil, err
	}
	spec, err := config.Parse(stored.Spec)
	if err != nil {
		return nil, fmt.Errorf("decode generation %d: %w", gen, err)
	}
	groups := canary.Groups(spec)
	// A new generation: its groups' figures start over; the counters of
	// each of its groups exist from now on, at 0 for a group that never
	// acted, so that increase() shows the first action; a group gone
	// loses its series.
	keep := make(map[string]bool, len(groups))
	for _, g := range groups {
		keep[g.Service] = true
		r.m.promotions.WithLabelValues(g.Service)
		r.m.rollbacks.WithLabelValues(g.Service)
	}
	for _, old := range r.groups {
		for _, g := range old {
			if !keep[g.Service] {
				r.m.promotions.DeleteLabelValues(g.Service)
				r.m.rollbacks.DeleteLabelValues(g.Service)
			}
		}
	}
	clear(r.groups)
	r.m.requests.Reset()
	r.m.errorRate.Reset()
	r.m.p99.Reset()
	r.groups[gen] = groups
	return groups, nil
}

// prime loads the groups of the newest generation while the runner does
// not hold the lock, so that its counters exist at 0 before it ever acts
// (groupsOf); errors are left to the next try.
func (r *Runner) prime(ctx context.Context, log *slog.Logger) {
	pctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	gen, err := r.Store.NewestID(pctx)
	if err != nil || gen == 0 {
		return
	}
	if _, err := r.groupsOf(pctx, gen); err != nil && ctx.Err() == nil {
		log.Debug("canary runner: groups not loaded", "generation", gen, "err", err)
	}
}

func fill(s *canary.Stats, t db.CanaryTotals) error {
	s.Requests, s.Errors = t.Requests, t.Errors
	return s.AddSparse(t.Latency)
}

func (r *Runner) gauges(service string, w *canary.Window) {
	for _, v := range []struct {
		name string
		s    *canary.Stats
	}{{db.VersionBaseline, &w.Baseline}, {db.VersionCanary, &w.Canary}} {
		f := v.s.Figures()
		r.m.requests.WithLabelValues(service, v.name).Set(float64(f.Requests))
		r.m.errorRate.WithLabelValues(service, v.name).Set(f.ErrorRate)
		r.m.p99.WithLabelValues(service, v.name).Set(f.LatencyP99)
	}
}
