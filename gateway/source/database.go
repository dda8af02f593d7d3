package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// Database defaults.
const (
	defaultHeartbeat = 5 * time.Second
	defaultResync    = 30 * time.Second
	// storeTimeout bounds one load or one instance record, so a database
	// that stopped answering is retried rather than waited on forever.
	storeTimeout = 15 * time.Second
)

// Store is what a Database needs of PostgreSQL: the newest generation's id
// (cheap, asked on every trigger), a generation with its spec (loaded only
// when that id is newer than the one applied), and the instance record.
// *db.Store implements it; its errors are db's (db.ErrNotFound for a
// generation that does not exist). It must be safe for concurrent use.
type Store interface {
	NewestID(ctx context.Context) (int64, error)
	Get(ctx context.Context, id int64) (apiv1.Generation, error)
	UpsertGateway(ctx context.Context, g apiv1.GatewayInstance) error
}

// Database keeps a data plane on the newest generation stored in
// PostgreSQL.
//
// It opens no LISTEN connection: the process's one db.Listener calls Notify
// on every notification on db.NotifyChannel and on every (re)connect, once
// it listens. Every load follows a trigger: Notify, the periodic Resync, or
// a retry after a failed load. Triggers do a non-blocking send into a
// capacity-1 channel, so a burst of publishes collapses into one load; each
// load asks for the newest generation's id (Store.NewestID) and loads that
// generation (Store.Get) only when its id is newer than the last one
// applied and than the one Serving reports, so an older generation is never
// applied and a notification of a generation already served (every publish
// of `dwara serve`, which its API applied before the 201) costs one
// index lookup, no spec. Because the listener notifies on every
// (re)connect, a notification missed while disconnected is never a missed
// generation.
//
// The stored spec is loaded and decoded once per generation with
// config.ParseAs (JSON) and handed to Apply. A spec that does not decode,
// or that Apply refuses, is logged and retried on the next trigger, from
// the spec decoded then (it is not loaded again). After each successful
// apply the Database records Instance (AppliedGeneration, AppliedAt, and
// the endpoint states from Endpoints) with Store.UpsertGateway, and every
// Heartbeat it refreshes the instance's LastHeartbeat and endpoint states.
// While PostgreSQL is down it retries with backoff and applies nothing, so
// the data plane keeps serving the last generation it applied.
//
// Set the fields before Run. Notify, Ready and Applied are safe for
// concurrent use, also before Run starts; a Database must not be copied
// after first use and Run must be called at most once.
type Database struct {
	// Store loads generations and records the instance (a *db.Store).
	// Required.
	Store Store
	// Instance identifies this data plane: the caller sets ID, Hostname,
	// Listen and StartedAt; the Database fills in the rest. An empty ID
	// means the instance is not recorded in gateway_instances.
	Instance apiv1.GatewayInstance
	// Apply switches the data plane to a generation. Required.
	Apply ApplyFunc
	// Endpoints, when non-nil, returns the states of the endpoints the data
	// plane serves (in a process, the proxy's Endpoints); they are recorded
	// with the instance after each apply and on every heartbeat, replacing
	// the ones recorded before. nil records an empty list. It must be safe
	// for concurrent use.
	Endpoints func() []apiv1.EndpointState
	// Serving, when non-nil, returns the generation the data plane already
	// serves, applied there by another path (in `dwara serve`, the API hands
	// each publish to the proxy before its 201). A stored generation that is
	// not newer is neither loaded, decoded nor applied again, only recorded
	// as applied. nil means only what this source applied counts. It must be
	// safe for concurrent use.
	Serving func() int64
	// Heartbeat is how often the instance's LastHeartbeat is refreshed;
	// 0 means 5s.
	Heartbeat time.Duration
	// Resync is how often the newest generation is loaded even without a
	// notification; 0 means 30s.
	Resync time.Duration
	// Logger receives apply and store errors; nil means slog.Default().
	Logger *slog.Logger
	// Trace, when non-nil, is called at each step of a load, for
	// measuring where publish-to-applied goes: "notified" (Notify),
	// "newest-id" (the id was read), "loaded" (the generation was read),
	// "decoded" (its spec was parsed); Apply follows.
	Trace func(stage string)

	initOnce  sync.Once
	kick      chan struct{} // capacity 1: pending triggers collapse
	ready     chan struct{}
	readyOnce sync.Once
	applied   atomic.Int64
}

func (s *Database) init() {
	s.initOnce.Do(func() {
		s.kick = make(chan struct{}, 1)
		s.ready = make(chan struct{})
	})
}

// Notify asks for a load of the newest generation. It never blocks: while a
// load is pending further calls collapse into it. The process's listener
// calls it on every notification on db.NotifyChannel and on every
// (re)connect; a call before Run is kept until Run starts.
func (s *Database) Notify() {
	s.init()
	s.trace("notified")
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Ready returns a channel that is closed once the first load has finished:
// the newest generation was applied, or there was none. It is never closed
// if Run stops before that.
func (s *Database) Ready() <-chan struct{} {
	s.init()
	return s.ready
}

// Applied returns the id of the last generation applied, 0 when none.
func (s *Database) Applied() int64 {
	return s.applied.Load()
}

// Run keeps the data plane on the newest generation until ctx is done, then
// returns nil. It returns an error at once only when the Database is
// misconfigured.
func (s *Database) Run(ctx context.Context) error {
	if s.Store == nil || s.Apply == nil {
		return errors.New("database source: Store and Apply are required")
	}
	s.init()
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	resyncT := time.NewTicker(orDefault(s.Resync, defaultResync))
	defer resyncT.Stop()
	heartbeatT := time.NewTicker(orDefault(s.Heartbeat, defaultHeartbeat))
	defer heartbeatT.Stop()
	// retry re-runs a failed load with backoff, independently of the
	// listener (which may be connected while queries fail).
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	backoff := minBackoff

	inst := s.Instance
	var dec decoded
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.kick:
		case <-resyncT.C:
		case <-retry.C:
		case <-heartbeatT.C:
			s.record(ctx, log, inst)
			continue
		}
		changed, err := s.sync(ctx, &inst, &dec)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errRefused):
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
		s.readyOnce.Do(func() { close(s.ready) })
	}
}

// errRefused marks a generation that did not decode or that Apply refused,
// as opposed to a load error.
var errRefused = errors.New("refused")

// decoded is the last generation loaded and decoded, kept so that a
// generation retried after a refusal is neither loaded nor decoded again.
type decoded struct {
	id   int64
	spec *config.Spec
	err  error
}

// sync asks for the newest generation's id and, when it is newer than the
// last applied (and than what Serving reports), loads, decodes and applies
// that generation. changed reports that inst must be recorded: a
// generation was applied, or this is the first load.
func (s *Database) sync(ctx context.Context, inst *apiv1.GatewayInstance, dec *decoded) (changed bool, err error) {
	first := !s.isReady()
	loadCtx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	id, err := s.Store.NewestID(loadCtx)
	if err != nil {
		return false, fmt.Errorf("load newest generation id: %w", err)
	}
	s.trace("newest-id")
	if id <= s.applied.Load() { // 0: none published yet
		return first, nil
	}
	if s.Serving != nil && id <= s.Serving() {
		// Already serving it: the spec was validated and applied once, by
		// the path that applied it; record it, load nothing.
		s.applied.Store(id)
		inst.AppliedGeneration = id
		inst.AppliedAt = time.Now()
		return true, nil
	}
	if dec.id != id {
		g, err := s.Store.Get(loadCtx, id)
		if err != nil {
			return false, fmt.Errorf("load generation %d: %w", id, err)
		}
		s.trace("loaded")
		spec, err := config.ParseAs(g.Spec, config.FormatJSON)
		s.trace("decoded")
		*dec = decoded{id: id, spec: spec, err: err}
	}
	cancel()
	if dec.err != nil {
		return false, fmt.Errorf("%w generation %d: decode spec: %w", errRefused, id, dec.err)
	}
	if err := s.Apply(ctx, dec.spec, id); err != nil {
		return false, fmt.Errorf("%w generation %d: %w", errRefused, id, err)
	}
	*dec = decoded{}
	s.applied.Store(id)
	inst.AppliedGeneration = id
	inst.AppliedAt = time.Now()
	return true, nil
}

// record writes inst to gateway_instances with a fresh heartbeat and the
// endpoint states of this moment; errors are logged, the next heartbeat
// retries.
func (s *Database) record(ctx context.Context, log *slog.Logger, inst apiv1.GatewayInstance) {
	if inst.ID == "" {
		return
	}
	inst.LastHeartbeat = time.Time{} // the database's now
	inst.Endpoints = nil
	if s.Endpoints != nil {
		inst.Endpoints = s.Endpoints()
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := s.Store.UpsertGateway(rctx, inst); err != nil && ctx.Err() == nil {
		log.Warn("record gateway instance failed", "instance", inst.ID, "err", err)
	}
}

func (s *Database) trace(stage string) {
	if s.Trace != nil {
		s.Trace(stage)
	}
}

func (s *Database) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}
