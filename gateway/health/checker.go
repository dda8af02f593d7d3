package health

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/dwara/dwara/gateway/balance"
	"github.com/dwara/dwara/gateway/config"
)

// checker runs the active checks of one endpoint of one upstream in a
// goroutine of its own, from start until it is stopped.
type checker struct {
	upstream, endpoint string
	check              config.HealthCheck // normalised: every field set
	allowLinkLocal     bool
	state              *balance.State
	tally              *tally
	interval, timeout  time.Duration
	prober             *prober
	log                *slog.Logger

	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned

	// The verdict and the counts belong to the run goroutine while it runs
	// and to the Manager after done is closed.
	down                bool // this check holds the endpoint down
	successes, failures int  // consecutive
}

// start runs the checker in a new goroutine; the first check is sent at
// once.
func (c *checker) start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel, c.done = cancel, make(chan struct{})
	go c.run(ctx)
}

// stop asks the goroutine to stop; a check in progress is cut and counts
// for nothing. wait waits until the goroutine has ended (closing done is
// the last thing it does).
func (c *checker) stop() { c.cancel() }
func (c *checker) wait() { <-c.done }

func (c *checker) run(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		c.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// once sends one check and counts its outcome: an answer in the expected
// status range (200..399 unless the spec says otherwise) within the timeout
// is a success, anything else a failure.
func (c *checker) once(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, c.timeout)
	code, err := c.prober.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return // stopped mid-check
	}
	var reason string
	ok := false
	switch {
	case err != nil:
		reason = err.Error()
	case !c.check.ExpectedStatus.Contains(code):
		reason = "status " + strconv.Itoa(code)
	default:
		reason, ok = "status "+strconv.Itoa(code), true
	}
	if ok {
		// A passing check ends the passive checks' failure streaks and
		// ejection history (an ejection in progress runs its time).
		c.state.PassiveOK()
		c.successes++
		c.failures = 0
		if c.down && c.successes >= c.check.HealthyThreshold {
			c.down = false
			c.tally.release(c.state)
			c.log.Info("health check: endpoint up", "upstream", c.upstream, "endpoint", c.endpoint,
				"reason", reason, "successes", c.successes, "endpoint_up", c.state.Up())
		}
		return
	}
	c.failures++
	c.successes = 0
	if !c.down && c.failures >= c.check.UnhealthyThreshold {
		c.down = true
		c.tally.hold(c.state)
		c.log.Warn("health check: endpoint down", "upstream", c.upstream, "endpoint", c.endpoint,
			"reason", reason, "failures", c.failures)
	}
}

// tally counts the checks that hold one endpoint state down. Several
// upstreams may name the same endpoint address, and then share its
// balance.State; the endpoint is up only while none of their checks holds
// it down. Safe for concurrent use.
type tally struct {
	mu   sync.Mutex
	down int
	refs int // checkers using the tally; guarded by Manager.mu
}

// hold adds a check holding state down and marks it down.
func (t *tally) hold(state *balance.State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.down++
	state.SetUp(false)
}

// release removes a check holding state down and marks it up when it was
// the last one.
func (t *tally) release(state *balance.State) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.down--
	if t.down == 0 {
		state.SetUp(true)
	}
}

// holdIfDown adds a check holding state down when the endpoint is down
// already (held by another check, or marked down by other means), and
// reports whether it did: a check that starts on a down endpoint starts
// down, so handing an endpoint from one check to another does not flap.
func (t *tally) holdIfDown(state *balance.State) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Only the active verdict counts: an endpoint the passive checks have
	// ejected for a moment is not down for a new check.
	if t.down == 0 && !state.MarkedDown() {
		return false
	}
	t.down++
	state.SetUp(false)
	return true
}
