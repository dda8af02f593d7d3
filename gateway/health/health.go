// Package health runs the active health checks of upstream endpoints and
// marks them up or down in their balance.State, which the balancers and the
// proxy's failover read.
//
// A Manager owns one checker per (upstream, endpoint) whose upstream
// declares health_check. Each checker is a goroutine that sends
// GET <path> to the endpoint at once and then every interval_s seconds, on a
// fresh connection (Host: the endpoint's host:port, User-Agent:
// dwara-health, Connection: close; TLS for an https:// endpoint), with
// timeout_s as the limit of the whole check from dial to the answer's
// header. An answer in expected_status (200..399 by default) is a success;
// any other status, a refused or cut connection or a timeout is a failure.
// unhealthy_threshold consecutive
// failures mark the endpoint down, healthy_threshold consecutive successes
// mark it up again; an endpoint starts up. Each transition is logged once,
// with the reason (the status, or the error): down at Warn, up at Info.
//
// Reconcile is called with every generation: a checker whose upstream,
// endpoint, settings and state are unchanged keeps running with its counts
// and its verdict, so a reload does not flap or burst probes; a checker
// whose settings changed is restarted with its verdict (up or down) kept
// and its counts reset; checkers no longer declared are stopped, and an
// endpoint they held down is up again. Stopping waits for the goroutine to
// end, so no checker outlives the generation that declared it.
//
// The registry keys states by endpoint address, so upstreams naming the
// same address share one state; it is up only while none of the checks
// declaring that address holds it down.
//
// Passive checks (failures of proxied requests) are not part of this
// package yet.
package health

import (
	"crypto/tls"
	"log/slog"
	"sync"
	"time"

	"github.com/dwara/dwara/gateway/balance"
	"github.com/dwara/dwara/gateway/config"
)

// Options configure a Manager. The zero value is usable.
type Options struct {
	// Logger receives the transitions; nil means slog.Default().
	Logger *slog.Logger
	// Interval returns the time between two checks of the given settings;
	// nil means IntervalS seconds. Tests use it to check faster than the
	// spec's one-second minimum.
	Interval func(config.HealthCheck) time.Duration
	// TLSConfig is the client configuration of checks to https endpoints;
	// nil means the defaults (the system's roots). The server name is the
	// endpoint's host unless TLSConfig names one.
	TLSConfig *tls.Config
}

// Target is one endpoint of one upstream to check.
type Target struct {
	// Upstream is the upstream's name, for the logs and the key.
	Upstream string
	// Endpoint is the address as the spec writes it: host:port (http) or
	// http(s)://host:port.
	Endpoint string
	// State is the endpoint's state, which the checks mark up or down.
	State *balance.State
	// Check is the upstream's health_check; zero fields mean the defaults
	// of config.Defaults.
	Check config.HealthCheck
	// AllowLinkLocal is the upstream's allow_link_local: whether a check
	// may dial a link-local or metadata address (config.CheckAddress).
	AllowLinkLocal bool
}

// key identifies a checker across generations.
type key struct{ upstream, endpoint string }

// Manager runs the checkers of the generation last given to Reconcile.
// Create it with NewManager; it is safe for concurrent use and must not be
// copied.
type Manager struct {
	log      *slog.Logger
	interval func(config.HealthCheck) time.Duration
	tls      *tls.Config

	mu       sync.Mutex // held through Reconcile and Close, never by checkers
	closed   bool
	checkers map[key]*checker
	tallies  map[*balance.State]*tally
}

// NewManager returns a Manager with no checkers.
func NewManager(o Options) *Manager {
	m := &Manager{
		log:      o.Logger,
		interval: o.Interval,
		tls:      o.TLSConfig,
		checkers: make(map[key]*checker),
		tallies:  make(map[*balance.State]*tally),
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	return m
}

// Reconcile makes targets the set of checked endpoints: it starts checkers
// for new targets, restarts those whose settings or state changed (keeping
// whether the endpoint is up) and stops those not in targets, waiting for
// each stopped goroutine to end. A target whose endpoint does not parse is
// logged and skipped; of two targets with the same upstream and endpoint
// the first is used. After Close, Reconcile does nothing.
func (m *Manager) Reconcile(targets []Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	next := make(map[key]*checker, len(targets))
	type restart struct{ old, new *checker }
	var restarts []restart
	var fresh []*checker
	for _, tg := range targets {
		k := key{tg.Upstream, tg.Endpoint}
		if _, dup := next[k]; dup {
			continue
		}
		hc := normalise(tg.Check)
		old := m.checkers[k]
		if old != nil && old.check == hc && old.state == tg.State && old.allowLinkLocal == tg.AllowLinkLocal {
			next[k] = old
			continue
		}
		c, err := m.newChecker(tg, hc)
		if err != nil {
			m.log.Error("health check not started", "upstream", tg.Upstream, "endpoint", tg.Endpoint, "err", err)
			continue
		}
		next[k] = c
		if old != nil {
			restarts = append(restarts, restart{old, c})
		} else {
			fresh = append(fresh, c)
		}
	}
	// Stop every checker that is replaced or removed, all at once, then
	// wait for them.
	var gone []*checker
	for k, c := range m.checkers {
		if next[k] != c {
			c.stop()
			gone = append(gone, c)
		}
	}
	for _, c := range gone {
		c.wait()
	}
	// A restarted checker takes over its predecessor's verdict (and its
	// hold on the state, when it is the same state).
	replaced := make(map[*checker]bool, len(restarts))
	for _, r := range restarts {
		replaced[r.old] = true
		if r.old.state == r.new.state {
			r.new.down = r.old.down
			m.unref(r.old, false)
		} else {
			m.unref(r.old, true)
			r.new.down = r.new.tally.holdIfDown(r.new.state)
		}
		r.new.start()
	}
	// New checkers start before removed ones let go, so an endpoint handed
	// from one upstream's check to another's stays down meanwhile.
	for _, c := range fresh {
		c.down = c.tally.holdIfDown(c.state)
		c.start()
	}
	for _, c := range gone {
		if !replaced[c] {
			m.unref(c, true)
		}
	}
	m.checkers = next
}

// Close stops every checker and waits for them; an endpoint they held down
// is up again. Reconcile does nothing after Close. Close may be called more
// than once.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for _, c := range m.checkers {
		c.stop()
	}
	for _, c := range m.checkers {
		c.wait()
	}
	for _, c := range m.checkers {
		m.unref(c, true)
	}
	clear(m.checkers)
}

// Len returns the number of checkers running.
func (m *Manager) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.checkers)
}

// newChecker builds the checker of tg with normalised settings hc, not
// started yet. Called under m.mu.
func (m *Manager) newChecker(tg Target, hc config.HealthCheck) (*checker, error) {
	u, err := config.ParseEndpoint(tg.Endpoint)
	if err != nil {
		return nil, err
	}
	var tc *tls.Config
	if u.Scheme == "https" {
		tc = tlsFor(m.tls, u.Host)
	}
	interval := time.Duration(hc.IntervalS) * time.Second
	if m.interval != nil {
		interval = m.interval(hc)
	}
	t := m.tallies[tg.State]
	if t == nil {
		t = new(tally)
		m.tallies[tg.State] = t
	}
	t.refs++
	return &checker{
		upstream:       tg.Upstream,
		endpoint:       tg.Endpoint,
		check:          hc,
		allowLinkLocal: tg.AllowLinkLocal,
		state:          tg.State,
		tally:          t,
		interval:       max(interval, time.Millisecond),
		timeout:        time.Duration(hc.TimeoutS) * time.Second,
		prober:         newProber(u.Host, hc.Path, tc, tg.AllowLinkLocal),
		log:            m.log,
	}, nil
}

// unref drops a stopped checker's use of its tally. With release, a hold
// it had on the endpoint is let go, and the endpoint is up again unless
// another check holds it. Called under m.mu.
func (m *Manager) unref(c *checker, release bool) {
	if release && c.down {
		c.down = false
		c.tally.release(c.state)
		m.log.Info("health check stopped: endpoint no longer held down",
			"upstream", c.upstream, "endpoint", c.endpoint, "endpoint_up", c.state.Up())
	}
	if c.tally.refs--; c.tally.refs == 0 {
		delete(m.tallies, c.state)
	}
}

// normalise fills the zero fields of hc with the defaults, as
// config.Defaults does.
func normalise(hc config.HealthCheck) config.HealthCheck {
	set := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	if hc.Path == "" {
		hc.Path = config.DefaultHealthPath
	}
	set(&hc.IntervalS, config.DefaultHealthIntervalS)
	set(&hc.TimeoutS, config.DefaultHealthTimeoutS)
	set(&hc.HealthyThreshold, config.DefaultHealthyThreshold)
	set(&hc.UnhealthyThreshold, config.DefaultUnhealthyThreshold)
	set(&hc.ExpectedStatus.Min, config.DefaultExpectedStatusMin)
	set(&hc.ExpectedStatus.Max, config.DefaultExpectedStatusMax)
	return hc
}
