package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Subscriber defaults.
const (
	defaultHeartbeat = 5 * time.Second
	defaultResync    = 30 * time.Second
	// storeTimeout bounds one load or one instance record, so a database
	// that stopped answering is retried rather than waited on forever.
	storeTimeout = 15 * time.Second
)

// Subscriber keeps a data plane on the newest generation.
//
// It runs a Listener on NotifyChannel. Notifications, reconnects, the
// periodic Resync and retries after a failed load all do a non-blocking send
// into a capacity-1 channel, so a burst of publishes collapses into one load;
// the applier loads Current and calls Apply only when its id is newer than
// the last one applied, so an older generation is never applied. Because it
// loads the newest on every (re)connect, a notification missed while
// disconnected is never a missed generation.
//
// After each successful apply it records Instance (AppliedGeneration,
// AppliedAt) with UpsertGateway, and every Heartbeat it refreshes the
// instance's LastHeartbeat. While PostgreSQL is down it keeps retrying and
// applies nothing, so the data plane keeps serving the last generation it
// applied.
//
// Set the fields before Run. Ready and Applied are safe for concurrent use
// (also before Run starts); a Subscriber must not be copied after first use
// and Run must be called at most once.
type Subscriber struct {
	// Store loads generations and records the instance. Required.
	Store *Store
	// Instance identifies this data plane: the caller sets ID, Hostname,
	// Listen and StartedAt; the Subscriber fills in the rest. An empty ID
	// means the instance is not recorded in gateway_instances.
	Instance GatewayInstance
	// Apply switches the data plane to g. It is called from one goroutine
	// at a time, with ids strictly increasing. An error is logged and g is
	// retried on the next trigger (notification, reconnect or resync).
	// Required.
	Apply func(ctx context.Context, g Generation) error
	// Heartbeat is how often the instance's LastHeartbeat is refreshed;
	// 0 means 5s.
	Heartbeat time.Duration
	// Resync is how often the newest generation is loaded even without a
	// notification; 0 means 30s.
	Resync time.Duration
	// Logger receives apply and store errors; nil means slog.Default().
	Logger *slog.Logger

	initOnce  sync.Once
	ready     chan struct{}
	readyOnce sync.Once
	applied   atomic.Int64
}

func (s *Subscriber) init() {
	s.initOnce.Do(func() { s.ready = make(chan struct{}) })
}

// Ready returns a channel that is closed once the first load has finished:
// the newest generation was applied, or there was none. It is never closed
// if Run stops before that.
func (s *Subscriber) Ready() <-chan struct{} {
	s.init()
	return s.ready
}

// Applied returns the id of the last generation applied, 0 when none.
func (s *Subscriber) Applied() int64 {
	return s.applied.Load()
}

// Run keeps the data plane on the newest generation until ctx is done, then
// returns nil after its goroutines have stopped. It returns an error at once
// only when the Subscriber is misconfigured.
func (s *Subscriber) Run(ctx context.Context) error {
	if s.Store == nil || s.Apply == nil {
		return errors.New("subscriber: Store and Apply are required")
	}
	s.init()
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	heartbeat := orDefault(s.Heartbeat, defaultHeartbeat)
	resync := orDefault(s.Resync, defaultResync)

	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	l := &Listener{
		ConnString: s.Store.ConnString(),
		Channels:   []string{NotifyChannel},
		OnConnect: func(context.Context) error {
			trigger()
			return nil
		},
		OnNotify: func(string, string) { trigger() },
		Logger:   log,
	}
	if _, err := l.config(); err != nil {
		return fmt.Errorf("subscriber: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	listenerDone := make(chan struct{})
	go func() {
		defer close(listenerDone)
		_ = l.Run(ctx) // misconfiguration was ruled out above
	}()
	defer func() { <-listenerDone }()
	defer cancel()

	resyncT := time.NewTicker(resync)
	defer resyncT.Stop()
	heartbeatT := time.NewTicker(heartbeat)
	defer heartbeatT.Stop()
	// retry re-runs a failed load with backoff, independently of the
	// listener (which may be connected while queries fail).
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	backoff := minBackoff

	inst := s.Instance
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-resyncT.C:
		case <-retry.C:
		case <-heartbeatT.C:
			s.record(ctx, log, inst)
			continue
		}
		changed, err := s.sync(ctx, &inst)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errApply):
			// Not ready, not recorded: the generation is retried on the
			// next trigger.
			log.Error("apply generation failed", "err", err)
			continue
		case err != nil:
			wait := jitter(backoff)
			backoff = min(2*backoff, maxBackoff)
			log.Warn("load newest generation failed", "err", err, "retry_in", wait)
			retry.Reset(wait)
			continue
		}
		backoff = minBackoff
		retry.Stop()
		if changed {
			s.record(ctx, log, inst)
		}
		s.markReady()
	}
}

// errApply marks an error returned by Apply, as opposed to a load error.
var errApply = errors.New("apply")

// sync loads the newest generation and applies it when it is newer than the
// last applied. changed reports that inst must be recorded: a generation
// was applied, or this is the first load.
func (s *Subscriber) sync(ctx context.Context, inst *GatewayInstance) (changed bool, err error) {
	first := !s.isReady()
	loadCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	g, err := s.Store.Current(loadCtx)
	cancel()
	if errors.Is(err, ErrNotFound) {
		return first, nil
	}
	if err != nil {
		return false, err
	}
	if g.ID <= s.applied.Load() {
		return first, nil
	}
	if err := s.Apply(ctx, g); err != nil {
		return false, fmt.Errorf("%w generation %d: %w", errApply, g.ID, err)
	}
	s.applied.Store(g.ID)
	inst.AppliedGeneration = g.ID
	inst.AppliedAt = time.Now()
	return true, nil
}

// record writes inst to gateway_instances with a fresh heartbeat; errors
// are logged, the next heartbeat retries.
func (s *Subscriber) record(ctx context.Context, log *slog.Logger, inst GatewayInstance) {
	if inst.ID == "" {
		return
	}
	inst.LastHeartbeat = time.Time{} // the database's now
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := s.Store.UpsertGateway(rctx, inst); err != nil && ctx.Err() == nil {
		log.Warn("record gateway instance failed", "instance", inst.ID, "err", err)
	}
}

func (s *Subscriber) markReady() {
	s.readyOnce.Do(func() { close(s.ready) })
}

func (s *Subscriber) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// orDefault returns d, or def when d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
