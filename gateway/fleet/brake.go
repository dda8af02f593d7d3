package fleet

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
)

// DefaultBrakeInterval is how often a Brake checks its groups.
const DefaultBrakeInterval = time.Second

// liveTimeout bounds one check that the runner is heard, so that a hung
// database or control plane delays a brake by at most this much.
const liveTimeout = 2 * time.Second

// localSlots is the most slots of a local window: the window of
// window_seconds is kept as up to this many sums of equal spans, so it
// slides by one span at a time.
const localSlots = 12

// BrakeProxy is what a Brake reads and changes of a data plane: the
// weights (through the same Weights a Follower uses, so that a gateway's
// state directory keeps the brake) and the canary weight in force of a
// group (proxy.Proxy.CanaryWeight).
type BrakeProxy interface {
	Weights
	CanaryWeight(service string) (int, bool)
}

// Brake is one data-plane process's local brake (canary_analysis
// .local_brake): it keeps, beside the Flusher's fleet-wide windows, this
// process's own window of each canary group (Observe, fed by the
// Flusher), and every Interval it checks whether it has heard from the
// canary runner (Live) and judges each group with canary.Brake. A group it
// brakes is put at 0 on this process only, counted in
// dwara_canary_local_brakes_total{group} and logged at WARN; the brake is
// then reported (Report) as one severe_rollback with actor
// local-brake:<Instance> as soon as the report can be written, and held
// until then: the weights set through Guard (the Follower's, the control
// plane's) leave the group at 0 while they give the weight it was braked
// from, and release it once the brake is reported or they give another
// weight (the runner recorded a newer one). While a report waits, Holding
// is true and the Flusher keeps its windows back, so the runner, once
// back, finds the brake recorded before it judges what this process saw.
//
// Set the fields, call Serving on every apply, then Run once. Observe,
// Serving, Holding and the Guard's methods are safe for concurrent use.
type Brake struct {
	// Live reports whether the canary runner is heard now: for a process
	// with a database, a runner's lease that has not expired
	// (db.Store.RunnerLive); for a gateway fed by the control plane, the
	// control plane answering ready. An error counts as not heard.
	// Required.
	Live func(ctx context.Context) (bool, error)
	// Report records a brake (db.Store.RecordLocalBrake); nil means this
	// process cannot write one (a gateway fed by the control plane): its
	// brake holds until the weights it follows change, and its windows,
	// which it flushes all the same, are how the runner learns of the
	// failure.
	Report func(ctx context.Context, e apiv1.CanaryEvent, configured int) (apiv1.CanaryEvent, bool, error)
	// Instance is the process's instance id, in the report's actor.
	Instance string
	// Proxy is the data plane. Required.
	Proxy BrakeProxy
	// Interval is the time between checks; 0 means DefaultBrakeInterval.
	Interval time.Duration
	// Metrics receives dwara_canary_local_brakes_total; nil registers it
	// nowhere. Its series of every group of the generation served exist
	// at 0 from Serving on.
	Metrics prometheus.Registerer
	// Logger logs brakes and reports; nil means slog.Default().
	Logger *slog.Logger
	// Braked, when non-nil, is called with every brake (not yet
	// recorded: no id).
	Braked func(apiv1.CanaryEvent)
	// Reported, when non-nil, is called after each report written, with
	// the stored event and whether it was recorded (false: the canary was
	// already at 0, or the generation is no longer the newest). A process
	// wires its Follower's Notify here.
	Reported func(e apiv1.CanaryEvent, recorded bool)

	once  sync.Once
	count *prometheus.CounterVec

	mu     sync.Mutex
	gen    int64
	groups map[string]*localGroup
	// heard is when the runner was last heard (the process's start before
	// the first time).
	heard time.Time
}

// localGroup is a Brake's view of one canary group of the generation
// served.
type localGroup struct {
	g      canary.Group
	window time.Duration
	span   time.Duration
	slots  []localSlot
	// braked is set while a brake of the group holds; from is the weight
	// it was braked from; event is its report, pending until reported.
	braked   bool
	from     int
	reported bool
	event    apiv1.CanaryEvent
}

type localSlot struct {
	start time.Time
	w     canary.Window
}

func (b *Brake) init() {
	b.once.Do(func() {
		b.count = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dwara_canary_local_brakes_total",
			Help: "Canary groups this process put at 0 on its own (the local brake): it had heard nothing from the canary runner for local_brake.after_seconds and its own window showed the canary above twice the rollback threshold, by group (service).",
		}, []string{"group"})
		if b.Metrics != nil {
			b.Metrics.MustRegister(b.count)
		}
		b.heard = time.Now()
	})
}

func (b *Brake) log() *slog.Logger {
	if b.Logger != nil {
		return b.Logger
	}
	return slog.Default()
}

// Serving tells b the spec and generation the data plane now serves: a
// new generation starts every local window empty and ends every brake
// (its groups are new: a publish starts them afresh or carries over their
// recorded state), and the counters of its groups exist from now on.
func (b *Brake) Serving(spec *config.Spec, generation int64) {
	b.init()
	b.mu.Lock()
	defer b.mu.Unlock()
	if generation == b.gen {
		return
	}
	groups := canary.Groups(spec)
	keep := make(map[string]*localGroup, len(groups))
	for _, g := range groups {
		b.count.WithLabelValues(g.Service)
		window := time.Duration(g.Analysis.WindowSeconds) * time.Second
		n := min(localSlots, max(g.Analysis.WindowSeconds, 1))
		keep[g.Service] = &localGroup{g: g, window: window, span: max(window/time.Duration(n), time.Millisecond), slots: make([]localSlot, n)}
	}
	for service := range b.groups {
		if keep[service] == nil {
			b.count.DeleteLabelValues(service)
		}
	}
	b.gen, b.groups = generation, keep
}

// Observe adds the requests of service's baseline and canary that
// generation's recorders counted since the last Observe to its local
// window (the Flusher calls it with each Delta). A generation that is
// not the one of Serving is ignored.
func (b *Brake) Observe(generation int64, service string, baseline, can *canary.Stats) {
	if baseline.Requests == 0 && can.Requests == 0 {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	lg := b.groups[service]
	if generation != b.gen || lg == nil {
		return
	}
	start := now.Truncate(lg.span)
	s := &lg.slots[int(start.UnixNano()/int64(lg.span))%len(lg.slots)]
	if !s.start.Equal(start) {
		s.start = start
		s.w = canary.Window{}
	}
	s.w.Baseline.Add(baseline)
	s.w.Canary.Add(can)
}

// Holding reports whether a brake waits to be reported; the Flusher keeps
// its windows back meanwhile. Always false without Report.
func (b *Brake) Holding() bool {
	if b.Report == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, lg := range b.groups {
		if lg.braked && !lg.reported {
			return true
		}
	}
	return false
}

// Guard returns w with b's brakes kept: a weight set on a braked group
// is skipped while it is the weight the group was braked from and the
// brake is not reported; any other weight, or any weight once the brake
// is reported, ends the brake and is set. w is usually b.Proxy.
func (b *Brake) Guard(w Weights) Weights { return guarded{b: b, w: w} }

type guarded struct {
	b *Brake
	w Weights
}

func (g guarded) Generation() int64 { return g.w.Generation() }

func (g guarded) SetCanaryWeight(generation int64, service string, weight int) (bool, error) {
	b := g.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if lg := b.groups[service]; lg != nil && generation == b.gen && lg.braked {
		if weight == lg.from && !lg.reported {
			return true, nil // the weight the brake overrides: the brake holds
		}
		lg.braked = false
		b.log().Info("canary local brake: superseded by the recorded weight", "service", service, "generation", generation,
			"weight", weight, "reported", lg.reported)
	}
	return g.w.SetCanaryWeight(generation, service, weight)
}

// Run checks every Interval until ctx is done; it returns nil.
func (b *Brake) Run(ctx context.Context) error {
	b.init()
	if b.Interval <= 0 {
		b.Interval = DefaultBrakeInterval
	}
	tick := time.NewTicker(b.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		lctx, cancel := context.WithTimeout(ctx, min(liveTimeout, opTimeout))
		live, err := b.Live(lctx)
		cancel()
		if err == nil && live {
			b.mu.Lock()
			b.heard = time.Now()
			b.mu.Unlock()
		}
		if b.Report != nil && err == nil {
			b.report(ctx)
		}
		b.check()
	}
}

// check judges every group not braked on its local window.
func (b *Brake) check() {
	now := time.Now()
	gen := b.Proxy.Generation()
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen == 0 || gen != b.gen {
		return
	}
	silent := now.Sub(b.heard)
	for service, lg := range b.groups {
		if lg.braked {
			continue
		}
		weight, ok := b.Proxy.CanaryWeight(service)
		if !ok {
			continue
		}
		var w canary.Window
		for i := range lg.slots {
			if s := &lg.slots[i]; !s.start.IsZero() && now.Sub(s.start) < lg.window {
				w.Baseline.Add(&s.w.Baseline)
				w.Canary.Add(&s.w.Canary)
			}
		}
		a, ok := canary.Brake(lg.g, weight, silent, &w)
		if !ok {
			continue
		}
		if set, err := b.Proxy.SetCanaryWeight(gen, service, 0); err != nil || !set {
			b.log().Error("canary local brake: the weight was not set", "service", service, "generation", gen, "err", err)
			continue
		}
		bf, cf, pv := a.Baseline, a.Canary, a.PValue
		lg.braked, lg.from, lg.reported = true, weight, false
		lg.event = apiv1.CanaryEvent{GenerationID: gen, Service: service, FromWeight: a.From, ToWeight: 0,
			Action: a.Kind, Reason: a.Reason, Baseline: &bf, Canary: &cf, PValue: &pv,
			InstanceID: b.Instance, Rule: a.Rule, RuleFigures: a.RuleFigures}
		b.count.WithLabelValues(service).Inc()
		b.log().Warn("canary local brake: no word from the canary runner, and this proxy's own window shows the canary failing: canary at 0 on this proxy",
			"service", service, "generation", gen, "from", weight, "silent_seconds", int(silent.Seconds()),
			"metric", lg.g.Analysis.Rollback.Metric, "canary", a.RuleFigures["canary"], "limit", a.RuleFigures["limit"],
			"requests", a.RuleFigures["requests"], "canary_requests", a.RuleFigures["canary_requests"],
			"canary_error_rate", cf.ErrorRate, "canary_p99_seconds", cf.LatencyP99, "reason", a.Reason)
		if b.Braked != nil {
			b.Braked(lg.event)
		}
	}
}

// report writes every brake that waits to be reported; one that fails
// waits for the next check.
func (b *Brake) report(ctx context.Context) {
	type pending struct {
		event      apiv1.CanaryEvent
		configured int
	}
	var todo []pending
	b.mu.Lock()
	for _, lg := range b.groups {
		if lg.braked && !lg.reported {
			todo = append(todo, pending{lg.event, lg.g.Configured})
		}
	}
	b.mu.Unlock()
	for _, p := range todo {
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		stored, recorded, err := b.Report(rctx, p.event, p.configured)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				b.log().Warn("canary local brake: not reported yet", "service", p.event.Service, "err", err)
			}
			continue
		}
		b.mu.Lock()
		if lg := b.groups[p.event.Service]; lg != nil && b.gen == p.event.GenerationID {
			lg.reported = true
		}
		b.mu.Unlock()
		if recorded {
			b.log().Warn("canary local brake: recorded as a severe_rollback", "service", stored.Service, "generation", stored.GenerationID,
				"event", stored.ID, "from", stored.FromWeight, "actor", stored.Actor)
		} else {
			b.log().Info("canary local brake: reported; already at 0 in the fleet, or the generation was replaced", "service", p.event.Service,
				"generation", p.event.GenerationID)
		}
		if b.Reported != nil {
			b.Reported(stored, recorded)
		}
	}
}
