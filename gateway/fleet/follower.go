package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
)

// DefaultFollowResync is how often a Follower reloads the transient
// weights without being told to.
const DefaultFollowResync = 30 * time.Second

// Weights is what a Follower changes in a data plane (a *proxy.Proxy).
type Weights interface {
	// Generation returns the generation being served, 0 for none.
	Generation() int64
	// SetCanaryWeight sets the canary weight in force of service's group
	// in generation; false when generation is not the one served.
	SetCanaryWeight(generation int64, service string, canaryWeight int) (bool, error)
}

// Follower applies the canary controller's transient weights to a data
// plane: on every Notify (a canary notification, a (re)connect of the
// process's listener, an apply) and every Resync, it loads the weights in
// force for the generation being served and sets each. Bursts of Notify
// collapse into one load. Set the fields, then call Run once.
type Follower struct {
	// Store has the canary events. Required.
	Store *db.Store
	// Proxy is the data plane. Required.
	Proxy Weights
	// Resync is the time between loads without a Notify; 0 means
	// DefaultFollowResync.
	Resync time.Duration
	// Logger logs failed loads; nil means slog.Default().
	Logger *slog.Logger
	// Loaded, when non-nil, is called after each load that succeeded,
	// with the generation it was for (tests wait on it).
	Loaded func(generation int64)

	once sync.Once
	wake chan struct{}
}

func (f *Follower) init() {
	f.once.Do(func() { f.wake = make(chan struct{}, 1) })
}

// Notify asks for a load; it never blocks. Safe for concurrent use.
func (f *Follower) Notify() {
	f.init()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Run loads on every Notify and every Resync until ctx is done; it returns
// nil. A failed load is retried at the next Notify or Resync.
func (f *Follower) Run(ctx context.Context) error {
	f.init()
	if f.Resync <= 0 {
		f.Resync = DefaultFollowResync
	}
	log := f.Logger
	if log == nil {
		log = slog.Default()
	}
	tick := time.NewTicker(f.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.wake:
		case <-tick.C:
		}
		gen := f.Proxy.Generation()
		if gen == 0 {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := f.load(lctx, gen)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("canary weights not loaded", "generation", gen, "err", err)
			}
			continue
		}
		if f.Loaded != nil {
			f.Loaded(gen)
		}
	}
}

func (f *Follower) load(ctx context.Context, gen int64) error {
	states, err := f.Store.CanaryStates(ctx, gen)
	if err != nil {
		return err
	}
	for service, st := range states {
		if !st.Transient {
			continue
		}
		if _, err := f.Proxy.SetCanaryWeight(gen, service, st.Weight); err != nil {
			return err
		}
	}
	return nil
}

// Overlay returns spec with the transient weights in force for generation
// (none: spec itself), so a data plane that applies a generation the
// controller already changed serves its weights from the first request.
func Overlay(ctx context.Context, store *db.Store, spec *config.Spec, generation int64) (*config.Spec, error) {
	groups := canary.Groups(spec)
	if len(groups) == 0 {
		return spec, nil // no weights to overlay: no query
	}
	states, err := store.CanaryStates(ctx, generation)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		st, ok := states[g.Service]
		if !ok || !st.Transient {
			continue
		}
		w := g.Weights(st.Weight)
		spec, err = config.SetWeights(spec, g.Service, map[string]int{g.Baseline: w[0], g.Canary: w[1]}, false)
		if err != nil {
			return nil, fmt.Errorf("overlay canary weights of %q in generation %d: %w", g.Service, generation, err)
		}
	}
	return spec, nil
}
