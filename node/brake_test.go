package node

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testnet"
)

// brakeCount returns dwara_canary_local_brakes_total{group=web} of p, and
// false when the series does not exist.
func brakeCount(t *testing.T, p *proc) (float64, bool) {
	t.Helper()
	v, ok := scrape(t, metricsAddr(p), "dwara_canary_local_brakes_total")["group=web"]
	return v, ok
}

// TestLocalBrakeWithoutTheDatabase: the local brake fires with PostgreSQL
// stopped and is recorded once after it returns. dwara serve and a
// gateway replica reach PostgreSQL through a relay; the relay is cut (the
// runner's lock, the lease and every connection go), the canary pool then
// fails half its requests, and traffic goes to both proxies. Each proxy,
// having heard nothing from the runner for after_seconds, judges its own
// window and puts the canary at 0: the canary then gets no request, and
// each counts one brake. Once the relay is restored, both report their
// brake: exactly one severe_rollback is recorded, by actor
// local-brake:<instance>, from 10 to 0, and weight 0 stays on both.
func TestLocalBrakeWithoutTheDatabase(t *testing.T) {
	t.Parallel()
	direct := dbtest.New(t)
	store := openTestStore(t, direct)
	relayed, relay := relayedURL(t, direct)

	var mu sync.Mutex
	reports := map[string][]bool{} // by process: recorded or not, per report
	braked := map[string]int{}
	hooks := func(name string, p *Process) {
		p.CanaryInterval, p.CanaryLockRetry, p.CanaryBrakeInterval = canaryInterval, 4*canaryInterval, canaryInterval
		p.CanaryBraked = func(e apiv1.CanaryEvent) {
			mu.Lock()
			defer mu.Unlock()
			braked[name]++
		}
		p.CanaryBrakeReported = func(e apiv1.CanaryEvent, recorded bool) {
			mu.Lock()
			defer mu.Unlock()
			reports[name] = append(reports[name], recorded)
		}
	}
	sc := ServeConfig{DatabaseURL: relayed}
	hooks("serve", &sc.Process)
	serve := startServe(t, sc)
	gc := GatewayConfig{DatabaseURL: relayed}
	hooks("replica", &gc.Process)
	replica := startGateway(t, gc)

	a, b := pools(t)
	ca := analysis(10, 200, 0)
	after := 2
	ca.LocalBrake = &config.LocalBrake{AfterSeconds: &after}
	g := publish(t, serve.Admin, canarySpec(a, b, ca))
	serve.waitApplied(t, g.ID)
	replica.waitApplied(t, g.ID)
	for _, p := range []*proc{serve, replica} {
		if v, ok := brakeCount(t, p); !ok || v != 0 {
			t.Fatalf("dwara_canary_local_brakes_total{group=web} = %v, %v before any brake; want 0", v, ok)
		}
	}

	relay.Cut()
	b.SetFailRate(0.5)
	next := ids(23)
	for _, p := range []*proc{replica, serve} {
		sendUntil(t, p.Proxy, next, 20000, "a local brake", func() bool {
			v, _ := brakeCount(t, p)
			return v == 1
		})
	}
	// Braked: the canary gets nothing on either proxy, the database still
	// away.
	if got := shares(t, 200, next, serve, replica); got["pool-a 200"] != 400 {
		t.Fatalf("after the brakes: answers %v, want all 400 from pool-a", got)
	}
	mu.Lock()
	if braked["serve"] != 1 || braked["replica"] != 1 || len(reports) != 0 {
		t.Errorf("with the database away: brakes %v, reports %v; want one brake each and no report", braked, reports)
	}
	mu.Unlock()
	if es := canaryEvents(t, store, g.ID); len(es) != 0 {
		t.Fatalf("events recorded with the database away: %+v", es)
	}

	relay.Restore()
	waitUntil(t, "both brakes reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports["serve"]) > 0 && len(reports["replica"]) > 0
	}, ticks(t, canaryInterval))
	waitWeight(t, 0, serve, replica)
	mu.Lock()
	recorded := 0
	for name, rs := range reports {
		if len(rs) != 1 {
			t.Errorf("%s reported %d times (%v), want once", name, len(rs), rs)
		}
		for _, r := range rs {
			if r {
				recorded++
			}
		}
	}
	mu.Unlock()
	if recorded != 1 {
		t.Errorf("%d reports recorded, want exactly 1: %v", recorded, reports)
	}
	es := canaryEvents(t, store, g.ID)
	var severe []apiv1.CanaryEvent
	for _, e := range es {
		if e.Action == apiv1.CanarySevereRollback {
			severe = append(severe, e)
		}
	}
	if len(severe) != 1 {
		t.Fatalf("events %+v; want exactly one severe_rollback", es)
	}
	e := severe[0]
	if e.FromWeight != 10 || e.ToWeight != 0 || e.InstanceID == "" || e.Actor != db.LocalBrakeActor(e.InstanceID) ||
		!strings.HasPrefix(e.Actor, "local-brake:") || e.Rule != "local_brake" {
		t.Errorf("brake recorded as %s %d -> %d by %q (instance %q, rule %q); want severe_rollback 10 -> 0 by local-brake:<instance>",
			e.Action, e.FromWeight, e.ToWeight, e.Actor, e.InstanceID, e.Rule)
	}
	if e.Canary == nil || e.Canary.ErrorRate <= 0.1 || e.Baseline == nil || e.Baseline.Requests+e.Canary.Requests < 200 ||
		e.RuleFigures["after_seconds"] != float64(after) || !(e.RuleFigures["silent_seconds"] >= float64(after)) {
		t.Errorf("figures %+v / %+v, rule figures %v; want the proxy's own window over 200 requests", e.Baseline, e.Canary, e.RuleFigures)
	}
	// The fleet is consistent at 0, and stays there: the runner, back,
	// judges the fleet's windows (the proxies' rows flushed after their
	// reports) and never raises it, and the canary gets nothing.
	waitUntil(t, "the runner judging the flushed windows", func() bool {
		for _, p := range []*proc{serve, replica} {
			if scrape(t, metricsAddr(p), "dwara_canary_window_requests")["group=web,version=canary"] > 0 {
				return true
			}
		}
		return false
	}, ticks(t, canaryInterval))
	if got := shares(t, 200, next, serve, replica); got["pool-a 200"] != 400 {
		t.Fatalf("after the report: answers %v, want all 400 from pool-a", got)
	}
	st, err := store.CanaryStates(t.Context(), g.ID)
	if err != nil || !st["web"].Transient || st["web"].Weight != 0 {
		t.Errorf("fleet state %+v, %v; want weight 0", st["web"], err)
	}
	for _, p := range []*proc{serve, replica} {
		if v, _ := brakeCount(t, p); v != 1 {
			t.Errorf("dwara_canary_local_brakes_total{group=web} = %v, want 1", v)
		}
	}
	if n := len(canaryEvents(t, store, g.ID)); n != len(es) {
		t.Errorf("%d events after the report, want %d: %s", n, len(es), fmt.Sprint(canaryEvents(t, store, g.ID)))
	}
}

// TestLocalBrakeControlPlaneGateway: a gateway fed by the control plane
// hears the runner as the control plane answering ready. With serve's
// database cut, it brakes on its own window (its counter at 1, the canary
// served nothing); it cannot write the event, so once the database is
// back the runner judges the windows the gateway flushed and records the
// rollback itself, which the gateway follows: weight 0 stays.
func TestLocalBrakeControlPlaneGateway(t *testing.T) {
	t.Parallel()
	direct := dbtest.New(t)
	store := openTestStore(t, direct)
	relayed, relay := relayedURL(t, direct)

	const token = "cp-token"
	admin := testnet.FreeAddr(t)
	sc := ServeConfig{DatabaseURL: relayed, AdminToken: token}
	sc.CanaryInterval, sc.CanaryLockRetry, sc.CanaryBrakeInterval = canaryInterval, 4*canaryInterval, canaryInterval
	serve := startServeOn(t, sc, admin)
	gc := GatewayConfig{ControlPlane: "http://" + admin, ControlPlaneToken: token}
	gc.CanaryInterval, gc.CanaryBrakeInterval = canaryInterval, canaryInterval
	braked := make(chan apiv1.CanaryEvent, 4)
	gc.CanaryBraked = func(e apiv1.CanaryEvent) { braked <- e }
	gw := startGateway(t, gc)

	a, b := pools(t)
	ca := analysis(10, 200, 0)
	after := 2
	ca.LocalBrake = &config.LocalBrake{AfterSeconds: &after}
	g := publishTo(t, store, canarySpec(a, b, ca))
	serve.waitApplied(t, g.ID)
	gw.waitApplied(t, g.ID)
	if v, ok := brakeCount(t, gw); !ok || v != 0 {
		t.Fatalf("dwara_canary_local_brakes_total{group=web} = %v, %v before any brake; want 0", v, ok)
	}

	relay.Cut()
	b.SetFailRate(0.5)
	next := ids(29)
	sendUntil(t, gw.Proxy, next, 20000, "a local brake on the gateway", func() bool {
		v, _ := brakeCount(t, gw)
		return v == 1
	})
	e := <-braked
	if e.FromWeight != 10 || e.ToWeight != 0 || e.Rule != "local_brake" {
		t.Errorf("brake %+v, want 10 -> 0 by rule local_brake", e)
	}
	if got := shares(t, 200, next, gw); got["pool-a 200"] != 200 {
		t.Fatalf("after the brake: answers %v, want all 200 from pool-a", got)
	}

	relay.Restore()
	waitUntil(t, "the runner's rollback recorded", func() bool {
		for _, e := range canaryEvents(t, store, g.ID) {
			if e.Action == apiv1.CanarySevereRollback {
				return true
			}
		}
		return false
	}, ticks(t, canaryInterval))
	waitWeight(t, 0, serve, gw)
	if got := shares(t, 200, next, gw); got["pool-a 200"] != 200 {
		t.Fatalf("after the runner's rollback: answers %v, want all 200 from pool-a", got)
	}
	if v, _ := brakeCount(t, gw); v != 1 {
		t.Errorf("dwara_canary_local_brakes_total{group=web} = %v, want 1", v)
	}
}

// relayedURL returns the database URL direct with its host replaced by a
// relay to it (testnet.NewRelay), and the relay, which the test cuts and
// restores to take the database away from whatever connects through it.
func relayedURL(t *testing.T, direct string) (string, *testnet.Relay) {
	t.Helper()
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	relay := testnet.NewRelay(t, u.Host)
	u.Host = relay.Addr()
	return u.String(), relay
}
