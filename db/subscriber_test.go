package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/db"
)

// subscriberHarness runs a Subscriber on its own database and reports each
// applied generation on applied.
type subscriberHarness struct {
	store   *db.Store
	url     string
	sub     *db.Subscriber
	applied chan db.Generation
	logs    chan string
	order   safeList[int64]
	// gateways receives the dwara_gateway notifications of the database.
	gateways <-chan note
}

func newSubscriber(t *testing.T, fail func(g db.Generation) error) *subscriberHarness {
	t.Helper()
	s, url := newStore(t)
	h := &subscriberHarness{store: s, url: url, applied: make(chan db.Generation, 100), logs: make(chan string, 1000)}
	h.gateways = watch(t, url, db.GatewayNotifyChannel)
	h.sub = &db.Subscriber{
		Store:    s,
		Instance: db.GatewayInstance{ID: "gw-test", Hostname: "test-host", Listen: "127.0.0.1:0", StartedAt: time.Now()},
		Apply: func(ctx context.Context, g db.Generation) error {
			if fail != nil {
				if err := fail(g); err != nil {
					return err
				}
			}
			h.order.add(g.ID)
			h.applied <- g
			return nil
		},
		// Long enough that only notifications and reconnects trigger a
		// load during a test.
		Resync:    time.Hour,
		Heartbeat: time.Hour,
		Logger:    testLogger(t, h.logs),
	}
	return h
}

func (h *subscriberHarness) start(t *testing.T) {
	t.Helper()
	runInBackground(t, h.sub.Run)
}

// waitApplied waits until Apply received generation id and the instance
// reported it, then checks Applied, gateway_instances and that ids were
// applied in strictly increasing order.
func (h *subscriberHarness) waitApplied(t *testing.T, id int64) {
	t.Helper()
	for {
		g := recv(t, h.applied, fmt.Sprintf("apply of generation %d", id))
		if g.ID > id {
			t.Fatalf("applied %d, want %d", g.ID, id)
		}
		if g.ID == id {
			if len(g.Spec) == 0 {
				t.Errorf("generation %d applied without its spec", id)
			}
			break
		}
	}
	h.waitReport(t, id)
	if got := h.sub.Applied(); got != id {
		t.Errorf("Applied() = %d, want %d", got, id)
	}
	gws, err := h.store.ListGateways(context.Background())
	if err != nil || len(gws) != 1 || gws[0].ID != "gw-test" || gws[0].AppliedGeneration != id ||
		gws[0].Hostname != "test-host" || (id > 0 && gws[0].AppliedAt.IsZero()) {
		t.Errorf("gateways = %+v, %v; want gw-test on generation %d", gws, err, id)
	}
	ids := h.order.snapshot()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("applied ids %v: not strictly increasing", ids)
		}
	}
}

// waitReport waits for gw-test's notification that it applied id.
func (h *subscriberHarness) waitReport(t *testing.T, id int64) {
	t.Helper()
	for {
		n := recv(t, h.gateways, fmt.Sprintf("gateway report of generation %d", id))
		var g db.GatewayInstance
		if err := json.Unmarshal([]byte(n.payload), &g); err != nil {
			t.Fatalf("gateway payload %q: %v", n.payload, err)
		}
		if g.ID == "gw-test" && g.AppliedGeneration == id {
			return
		}
	}
}

func waitReady(t *testing.T, sub *db.Subscriber) {
	t.Helper()
	select {
	case <-sub.Ready():
	case <-time.After(waitTimeout):
		t.Fatalf("subscriber not ready after %v", waitTimeout)
	}
}

func TestSubscriberAppliesNewestOnStart(t *testing.T) {
	t.Parallel()
	h := newSubscriber(t, nil)
	for i := 1; i <= 3; i++ {
		publish(t, h.store, i)
	}
	ready := h.sub.Ready() // usable before Run
	h.start(t)
	recv(t, ready, "ready")
	if got := h.sub.Applied(); got != 3 {
		t.Errorf("Applied() at ready = %d, want 3", got)
	}
	h.waitApplied(t, 3)
}

func TestSubscriberEmptyDatabase(t *testing.T) {
	t.Parallel()
	h := newSubscriber(t, nil)
	h.start(t)
	waitReady(t, h.sub)
	if got := h.sub.Applied(); got != 0 {
		t.Errorf("Applied() on an empty database = %d, want 0", got)
	}
	// The instance registers itself with nothing applied.
	h.waitReport(t, 0)

	publish(t, h.store, 1)
	h.waitApplied(t, 1)
}

func TestSubscriberFollowsPublishes(t *testing.T) {
	t.Parallel()
	h := newSubscriber(t, nil)
	h.start(t)
	waitReady(t, h.sub)

	for i := int64(1); i <= 5; i++ {
		publish(t, h.store, int(i))
		h.waitApplied(t, i)
	}
	// A burst collapses into fewer loads, but always ends on the newest and
	// never goes back.
	for i := 6; i <= 25; i++ {
		publish(t, h.store, i)
	}
	h.waitApplied(t, 25)
}

func TestSubscriberRetriesFailedApply(t *testing.T) {
	t.Parallel()
	var failures atomic.Int32
	h := newSubscriber(t, func(g db.Generation) error {
		if g.ID == 1 {
			failures.Add(1)
			return errors.New("cannot compile")
		}
		return nil
	})
	publish(t, h.store, 1)
	h.start(t)
	waitMessage(t, h.logs, "apply generation failed")
	select {
	case <-h.sub.Ready():
		t.Fatal("ready although the only generation failed to apply")
	default:
	}
	if got := h.sub.Applied(); got != 0 {
		t.Errorf("Applied() after a failed apply = %d, want 0", got)
	}

	publish(t, h.store, 2)
	h.waitApplied(t, 2)
	waitReady(t, h.sub)
	if failures.Load() != 1 {
		t.Errorf("generation 1 attempted %d times, want 1", failures.Load())
	}
}

func TestSubscriberSurvivesListenerKill(t *testing.T) {
	t.Parallel()
	h := newSubscriber(t, nil)
	publish(t, h.store, 1)
	h.start(t)
	h.waitApplied(t, 1)

	for round := int64(2); round <= 4; round++ {
		if k := killListeners(t, h.url); k != 1 {
			t.Fatalf("round %d: terminated %d listener backends, want 1", round, k)
		}
		// Publish while the listener is down (or just reconnecting): the
		// notification is lost, the load on reconnect must catch it.
		waitMessage(t, h.logs, "listener connection lost")
		publish(t, h.store, int(round))
		h.waitApplied(t, round)
	}

	// The new connection listens: a publish now arrives by notification
	// (Resync is an hour).
	publish(t, h.store, 5)
	h.waitApplied(t, 5)
}

func TestSubscriberHeartbeat(t *testing.T) {
	t.Parallel()
	h := newSubscriber(t, nil)
	h.sub.Heartbeat = 20 * time.Millisecond
	// Announce every heartbeat-only update of this test's database.
	exec(t, h.url, `
		CREATE FUNCTION test_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_notify('test_heartbeat', NEW.id);
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_heartbeat AFTER UPDATE ON gateway_instances FOR EACH ROW
			WHEN (OLD.applied_generation = NEW.applied_generation AND OLD.last_heartbeat < NEW.last_heartbeat)
			EXECUTE FUNCTION test_heartbeat()`)
	beats, connects := listen(t, h.url, "test_heartbeat")
	recv(t, connects, "heartbeat listener connect")
	publish(t, h.store, 1)
	h.start(t)
	h.waitApplied(t, 1)

	for i := range 2 {
		if n := recv(t, beats, "heartbeat"); n.payload != "gw-test" {
			t.Fatalf("heartbeat %d from %q, want gw-test", i, n.payload)
		}
	}
	gws, err := h.store.ListGateways(context.Background())
	if err != nil || len(gws) != 1 || gws[0].AppliedGeneration != 1 {
		t.Errorf("gateways after heartbeats = %+v, %v; want generation 1 kept", gws, err)
	}
}

func TestSubscriberMisconfigured(t *testing.T) {
	t.Parallel()
	sub := &db.Subscriber{}
	if err := sub.Run(context.Background()); err == nil {
		t.Error("Run without Store and Apply = nil, want an error")
	}
}

func TestSubscriberKeepsRetryingWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	// A port that was just free: every connection is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s, err := db.Open(context.Background(), fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", addr))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)

	logs := make(chan string, 1000)
	sub := &db.Subscriber{
		Store: s,
		Apply: func(context.Context, db.Generation) error {
			t.Error("Apply called without a database")
			return nil
		},
		Logger: testLogger(t, logs),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	waitMessage(t, logs, "listener connect failed")
	waitMessage(t, logs, "listener connect failed")
	select {
	case <-sub.Ready():
		t.Error("ready without a database")
	default:
	}
	cancel()
	if err := recv(t, done, "Run to return after cancel"); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if got := sub.Applied(); got != 0 {
		t.Errorf("Applied() = %d, want 0", got)
	}
}
