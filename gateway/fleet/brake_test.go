package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testrun"
)

// fakeProxy is a data plane of one generation with canary weights.
type fakeProxy struct {
	mu      sync.Mutex
	gen     int64
	weights map[string]int
	sets    int
}

func (p *fakeProxy) Generation() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

func (p *fakeProxy) SetCanaryWeight(gen int64, service string, w int) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return false, nil
	}
	p.weights[service] = w
	p.sets++
	return true, nil
}

func (p *fakeProxy) CanaryWeight(service string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w, ok := p.weights[service]
	return w, ok
}

// brakeRig is a Brake on a fakeProxy serving generation 1 of service api
// (90/10, local brake after 1 s), whose runner is heard while live holds
// and whose reports fail while down holds.
type brakeRig struct {
	b          *Brake
	px         *fakeProxy
	reg        *prometheus.Registry
	mu         sync.Mutex
	live, down bool
	reports    []apiv1.CanaryEvent
	braked     chan apiv1.CanaryEvent
	reported   chan bool
}

func newBrakeRig(t *testing.T, live bool) *brakeRig {
	t.Helper()
	r := &brakeRig{px: &fakeProxy{gen: 1, weights: map[string]int{"api": 10}}, reg: prometheus.NewRegistry(),
		live: live, braked: make(chan apiv1.CanaryEvent, 10), reported: make(chan bool, 10)}
	r.b = &Brake{
		Live: func(context.Context) (bool, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.down {
				return false, errors.New("database away")
			}
			return r.live, nil
		},
		Report: func(_ context.Context, e apiv1.CanaryEvent, configured int) (apiv1.CanaryEvent, bool, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.down {
				return apiv1.CanaryEvent{}, false, errors.New("database away")
			}
			r.reports = append(r.reports, e)
			return e, len(r.reports) == 1, nil
		},
		Instance: "gw-1", Proxy: r.px, Interval: 20 * time.Millisecond, Metrics: r.reg,
		Braked:   func(e apiv1.CanaryEvent) { r.braked <- e },
		Reported: func(_ apiv1.CanaryEvent, recorded bool) { r.reported <- recorded },
	}
	ca := analysis
	after := 1
	ca.LocalBrake = &config.LocalBrake{AfterSeconds: &after}
	r.b.Serving(spectest.Canary(90, 10).Analysis(ca).Spec(), 1)
	return r
}

func (r *brakeRig) set(live, down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live, r.down = live, down
}

// observe feeds the brake n requests of each version, failing cErr of the
// canary's.
func (r *brakeRig) observe(n, cErr uint64) {
	r.b.Observe(1, "api", &canary.Stats{Requests: n}, &canary.Stats{Requests: n, Errors: cErr})
}

func (r *brakeRig) count() float64 {
	return testutil.ToFloat64(r.b.count.WithLabelValues("api"))
}

// The brake fires once the runner has been silent for after_seconds, holds
// the canary at 0 against the weight it was braked from until reported,
// keeps the flusher's rows back meanwhile, and is reported once.
func TestBrakeHoldsUntilReported(t *testing.T) {
	t.Parallel()
	r := newBrakeRig(t, false)
	r.set(false, true) // the database away from the start
	if got := testutil.CollectAndCount(r.reg, "dwara_canary_local_brakes_total"); got != 1 || r.count() != 0 {
		t.Fatalf("brake counter: %d series at %v; want one at 0 before any brake", got, r.count())
	}
	r.observe(100, 60)
	stop := testrun.Background(t, r.b.Run)
	defer stop()
	var e apiv1.CanaryEvent
	select {
	case e = <-r.braked:
	case <-time.After(testrun.Timeout):
		t.Fatal("no brake")
	}
	if w, _ := r.px.CanaryWeight("api"); w != 0 || e.FromWeight != 10 || e.ToWeight != 0 || e.Action != apiv1.CanarySevereRollback ||
		e.InstanceID != "gw-1" || !(e.RuleFigures["silent_seconds"] >= 1) || r.count() != 1 {
		t.Fatalf("brake %+v, weight %d, count %v; want severe_rollback 10 -> 0 after >= 1 s, counted", e, w, r.count())
	}
	if !r.b.Holding() {
		t.Error("a brake waits to be reported, but the flusher is not held")
	}
	// The follower's load of the weight in force it was braked from is
	// skipped: the brake holds.
	g := r.b.Guard(r.px)
	if ok, err := g.SetCanaryWeight(1, "api", 10); !ok || err != nil {
		t.Fatalf("guarded set = %v, %v", ok, err)
	}
	if w, _ := r.px.CanaryWeight("api"); w != 0 {
		t.Fatalf("weight %d after the follower's stale load, want the brake's 0", w)
	}

	r.set(false, false) // the database back, no runner yet
	select {
	case recorded := <-r.reported:
		if !recorded {
			t.Error("first report not recorded")
		}
	case <-time.After(testrun.Timeout):
		t.Fatal("not reported")
	}
	testrun.Eventually(t, "the flusher released", func() bool { return !r.b.Holding() })
	// Once reported, the recorded weight is set again.
	if _, err := g.SetCanaryWeight(1, "api", 0); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	n := len(r.reports)
	r.mu.Unlock()
	if n != 1 || r.count() != 1 {
		t.Errorf("%d reports, count %v; want one brake reported once", n, r.count())
	}
}

// No brake while the runner is heard, nor on a healthy canary; a weight
// the runner recorded since supersedes a brake before its report.
func TestBrakeNotWhileHeard(t *testing.T) {
	t.Parallel()
	r := newBrakeRig(t, true)
	r.observe(1000, 900)
	stop := testrun.Background(t, r.b.Run)
	// 3 s of checks, three times after_seconds: heard every check.
	deadline := time.After(3 * time.Second)
	select {
	case e := <-r.braked:
		t.Fatalf("braked while the runner is heard: %+v", e)
	case <-deadline:
	}
	stop()
	if w, _ := r.px.CanaryWeight("api"); w != 10 || r.count() != 0 {
		t.Fatalf("weight %d, count %v; want 10 and no brake", w, r.count())
	}

	// Superseded: a different weight recorded by the runner ends the brake.
	r2 := newBrakeRig(t, false)
	r2.set(false, true)
	r2.observe(1000, 900)
	stop2 := testrun.Background(t, r2.b.Run)
	defer stop2()
	select {
	case <-r2.braked:
	case <-time.After(testrun.Timeout):
		t.Fatal("no brake")
	}
	if _, err := r2.b.Guard(r2.px).SetCanaryWeight(1, "api", 5); err != nil {
		t.Fatal(err)
	}
	if w, _ := r2.px.CanaryWeight("api"); w != 5 {
		t.Errorf("weight %d after a newer recorded weight, want 5", w)
	}
	// A new generation ends every brake and starts the windows empty.
	r2.px.mu.Lock()
	r2.px.gen = 2
	r2.px.mu.Unlock()
	r2.b.Serving(spectest.Canary(90, 10).Analysis(analysis).Spec(), 2)
	if r2.b.Holding() {
		t.Error("a brake of a replaced generation still holds the flusher")
	}
}
