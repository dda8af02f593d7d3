package db_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
)

func brakeEvent(generation int64, instance string) apiv1.CanaryEvent {
	return apiv1.CanaryEvent{GenerationID: generation, Service: "api", ToWeight: 0, Action: apiv1.CanarySevereRollback,
		Reason: "local brake by the test", InstanceID: instance, Rule: "local_brake",
		Canary:      &apiv1.CanaryFigures{Requests: 100, Errors: 60, ErrorRate: 0.6},
		Baseline:    &apiv1.CanaryFigures{Requests: 900, Errors: 9, ErrorRate: 0.01},
		PValue:      ptr(0.0001),
		RuleFigures: map[string]float64{"canary": 0.6, "limit": 0.1}}
}

// Of several proxies reporting a brake of one canary at once, and their
// retries, exactly one is recorded, from the weight in force; none once it
// is at 0, nor in a generation that is not the newest.
func TestRecordLocalBrakeOnce(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	publish(t, s, 1)
	l := lockCanary(t, s)
	record(t, l, controllerAction(1, "api", apiv1.CanaryPromote, 10, 15), 10)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var recorded []apiv1.CanaryEvent
	for i := range 8 {
		wg.Go(func() {
			for range 3 { // each report retried
				e, ok, err := s.RecordLocalBrake(ctx, brakeEvent(1, []string{"gw-a", "gw-b"}[i%2]), 10)
				if err != nil {
					t.Errorf("RecordLocalBrake: %v", err)
					return
				}
				if ok {
					mu.Lock()
					recorded = append(recorded, e)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(recorded) != 1 {
		t.Fatalf("recorded %d brakes, want exactly 1: %+v", len(recorded), recorded)
	}
	e := recorded[0]
	if e.Action != apiv1.CanarySevereRollback || e.FromWeight != 15 || e.ToWeight != 0 ||
		e.Actor != db.LocalBrakeActor(e.InstanceID) || e.Rule != "local_brake" || e.Canary == nil || e.Canary.Errors != 60 ||
		e.RuleFigures["limit"] != 0.1 {
		t.Errorf("recorded %+v; want severe_rollback 15 -> 0 by local-brake:<instance> with its figures", e)
	}
	st, err := s.CanaryStates(ctx, 1)
	if err != nil || !st["api"].Transient || st["api"].Weight != 0 {
		t.Errorf("state after the brake = %+v, %v; want weight 0", st["api"], err)
	}
	// The runner's own record then sees weight 0.
	if _, ok, err := l.Record(ctx, controllerAction(1, "api", apiv1.CanaryRollback, 15, 10), 10); err != nil || ok {
		t.Errorf("runner's record over the brake = %v, %v; want not recorded", ok, err)
	}

	// A canary the controller never moved brakes from its configured weight.
	publish(t, s, 2)
	if _, ok, err := s.RecordLocalBrake(ctx, brakeEvent(1, "gw-a"), 10); err != nil || ok {
		t.Errorf("brake of an old generation = %v, %v; want not recorded", ok, err)
	}
	e2, ok, err := s.RecordLocalBrake(ctx, brakeEvent(2, "gw-a"), 20)
	if err != nil || !ok || e2.FromWeight != 20 {
		t.Errorf("brake from the configured weight = %+v, %v, %v", e2, ok, err)
	}
	if _, _, err := s.RecordLocalBrake(ctx, controllerAction(2, "api", apiv1.CanaryPromote, 0, 5), 20); err == nil {
		t.Error("a promote was recorded as a brake")
	}
}

func TestRunnerLive(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	if live, err := s.RunnerLive(ctx); err != nil || live {
		t.Fatalf("RunnerLive with no runner = %v, %v; want false", live, err)
	}
	l, err := s.TryCanaryLease(ctx, "runner-1", 2*time.Second)
	if err != nil || l == nil {
		t.Fatalf("TryCanaryLease = %v, %v", l, err)
	}
	defer l.Close(ctx)
	if live, err := s.RunnerLive(ctx); err != nil || !live {
		t.Fatalf("RunnerLive with a fresh lease = %v, %v; want true", live, err)
	}
	conn := connectTest(t, s.ConnString())
	if _, err := conn.Exec(ctx, `UPDATE canary_runner_lease SET until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if live, err := s.RunnerLive(ctx); err != nil || live {
		t.Fatalf("RunnerLive with an expired lease = %v, %v; want false", live, err)
	}
}
