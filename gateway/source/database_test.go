package source_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/source"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// applyCall is one call of Database.Apply.
type applyCall struct {
	gen  int64
	spec *config.Spec
}

// databaseHarness runs a Database on its own database and reports each
// applied generation on applied.
type databaseHarness struct {
	store   *db.Store
	url     string
	src     *source.Database
	applied chan applyCall
	logs    chan string
	order   safeList[int64]
	// gateways receives the payloads of the dwara_gateway notifications of
	// the database.
	gateways <-chan string
}

// newDatabase returns a harness whose Apply fails with fail's error when
// fail is non-nil and returns one.
func newDatabase(t *testing.T, fail func(gen int64) error) *databaseHarness {
	t.Helper()
	s, url := dbtest.NewStore(t)
	h := &databaseHarness{store: s, url: url, applied: make(chan applyCall, 100), logs: make(chan string, 1000)}
	h.gateways = dbtest.Watch(t, url, db.GatewayNotifyChannel)
	h.src = &source.Database{
		Store:    s,
		Instance: apiv1.GatewayInstance{ID: "gw-test", Hostname: "test-host", Listen: "127.0.0.1:0", StartedAt: time.Now()},
		Apply: func(_ context.Context, spec *config.Spec, gen int64) error {
			if fail != nil {
				if err := fail(gen); err != nil {
					return err
				}
			}
			h.order.add(gen)
			h.applied <- applyCall{gen, spec}
			return nil
		},
		// Long enough that only Notify triggers a load during a test.
		Resync:    time.Hour,
		Heartbeat: time.Hour,
		Logger:    testlog.New(t, h.logs),
	}
	return h
}

func (h *databaseHarness) start(t *testing.T) {
	t.Helper()
	testrun.Background(t, h.src.Run)
}

// waitApplied waits until Apply received generation id with its decoded
// spec and the instance reported it, then checks Applied,
// gateway_instances and that ids were applied in strictly increasing order.
func (h *databaseHarness) waitApplied(t *testing.T, id int64) {
	t.Helper()
	for {
		c := testrun.Recv(t, h.applied, fmt.Sprintf("apply of generation %d", id))
		if c.gen > id {
			t.Fatalf("applied %d, want %d", c.gen, id)
		}
		if c.gen == id {
			// spec(n) names its upstream after n.
			if c.spec == nil || len(c.spec.Upstreams) != 1 || c.spec.Upstreams[0].Name != fmt.Sprint("u", id) {
				t.Errorf("generation %d applied with spec %+v, want the decoded spec(%d)", id, c.spec, id)
			}
			break
		}
	}
	h.waitReport(t, id)
	if got := h.src.Applied(); got != id {
		t.Errorf("Applied() = %d, want %d", got, id)
	}
	gws, err := h.store.ListGateways(context.Background(), true)
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
func (h *databaseHarness) waitReport(t *testing.T, id int64) {
	t.Helper()
	for {
		payload := testrun.Recv(t, h.gateways, fmt.Sprintf("gateway report of generation %d", id))
		var g apiv1.GatewayInstance
		if err := json.Unmarshal([]byte(payload), &g); err != nil {
			t.Fatalf("gateway payload %q: %v", payload, err)
		}
		if g.ID == "gw-test" && g.AppliedGeneration == id {
			return
		}
	}
}

// expectNotReady checks that the first load has not finished.
func expectNotReady(t *testing.T, src *source.Database, why string) {
	t.Helper()
	select {
	case <-src.Ready():
		t.Fatalf("ready %s", why)
	default:
	}
}

func TestDatabaseNotifyBeforeRunAppliesNewest(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	for i := 1; i <= 3; i++ {
		publish(t, h.store, i)
	}
	ready := h.src.Ready() // usable before Run
	h.src.Notify()         // kept until Run starts
	h.start(t)
	testrun.Recv(t, ready, "ready")
	if got := h.src.Applied(); got != 3 {
		t.Errorf("Applied() at ready = %d, want 3", got)
	}
	h.waitApplied(t, 3)
}

func TestDatabaseEmpty(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	h.start(t)
	h.src.Notify()
	testrun.Recv(t, h.src.Ready(), "ready")
	if got := h.src.Applied(); got != 0 {
		t.Errorf("Applied() on an empty database = %d, want 0", got)
	}
	// The instance registers itself with nothing applied.
	h.waitReport(t, 0)

	publish(t, h.store, 1)
	h.src.Notify()
	h.waitApplied(t, 1)
}

// TestDatabaseFollowsListener wires the Database to a db.Listener as a
// process does: the connect loads the newest generation, and every publish
// arrives by notification (Resync is an hour).
func TestDatabaseFollowsListener(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	publish(t, h.store, 1)
	h.start(t)
	testrun.Recv(t, follow(t, h.url, h.src), "listener connect")
	h.waitApplied(t, 1)

	for i := int64(2); i <= 5; i++ {
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

func TestDatabaseRetriesRefusedApply(t *testing.T) {
	t.Parallel()
	var attempts atomic.Int32
	h := newDatabase(t, func(gen int64) error {
		if gen == 1 && attempts.Add(1) == 1 {
			return errors.New("cannot compile")
		}
		return nil
	})
	publish(t, h.store, 1)
	h.start(t)
	h.src.Notify()
	testlog.Wait(t, h.logs, "apply generation failed")
	expectNotReady(t, h.src, "although the only generation failed to apply")
	if got := h.src.Applied(); got != 0 {
		t.Errorf("Applied() after a failed apply = %d, want 0", got)
	}

	// The next trigger retries the same generation.
	h.src.Notify()
	h.waitApplied(t, 1)
	testrun.Recv(t, h.src.Ready(), "ready")
	if n := attempts.Load(); n != 2 {
		t.Errorf("generation 1 attempted %d times, want 2", n)
	}
}

func TestDatabaseRefusesUndecodableSpec(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	// Stored (the store takes any JSON object), but not a valid spec.
	publishSpec(t, h.store, json.RawMessage(`{"upstreams": [], "services": [{"name": "web", "upstream": "nowhere"}]}`))
	h.start(t)
	h.src.Notify()
	testlog.Wait(t, h.logs, "apply generation failed")
	expectNotReady(t, h.src, "although the only generation does not decode")
	select {
	case c := <-h.applied:
		t.Fatalf("Apply called with generation %d, whose spec does not decode", c.gen)
	default:
	}

	publish(t, h.store, 2)
	h.src.Notify()
	h.waitApplied(t, 2)
	testrun.Recv(t, h.src.Ready(), "ready")
}

func TestDatabaseSurvivesListenerKill(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	publish(t, h.store, 1)
	h.start(t)
	connects := follow(t, h.url, h.src)
	testrun.Recv(t, connects, "listener connect")
	h.waitApplied(t, 1)

	for round := int64(2); round <= 4; round++ {
		if k := dbtest.KillListeners(t, h.url); k != 1 {
			t.Fatalf("round %d: terminated %d listener backends, want 1", round, k)
		}
		// Publish while the listener is down (or just reconnecting): the
		// notification may be lost, the load on reconnect catches it.
		publish(t, h.store, int(round))
		testrun.Recv(t, connects, "reconnect")
		h.waitApplied(t, round)
	}

	// The new connection listens: a publish now arrives by notification
	// (Resync is an hour).
	publish(t, h.store, 5)
	h.waitApplied(t, 5)
}

func TestDatabaseHeartbeat(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	// Beats often; the test waits for two of them, whenever they come.
	h.src.Heartbeat = 20 * time.Millisecond
	// Announce every heartbeat-only update of this test's database.
	beats := heartbeats(t, h.url, "NEW.id")
	publish(t, h.store, 1)
	h.start(t)
	h.src.Notify()
	h.waitApplied(t, 1)

	for i := range 2 {
		if id := testrun.Recv(t, beats, "heartbeat"); id != "gw-test" {
			t.Fatalf("heartbeat %d from %q, want gw-test", i, id)
		}
	}
	gws, err := h.store.ListGateways(context.Background(), true)
	if err != nil || len(gws) != 1 || gws[0].AppliedGeneration != 1 {
		t.Errorf("gateways after heartbeats = %+v, %v; want generation 1 kept", gws, err)
	}
}

func TestDatabaseRecordsEndpointStates(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	allUp := []apiv1.EndpointState{
		{Upstream: "u1", Endpoint: "127.0.0.1:9001", Up: true, InFlight: 2},
		{Upstream: "u1", Endpoint: "127.0.0.1:9002", Up: true},
	}
	oneDown := []apiv1.EndpointState{
		{Upstream: "u1", Endpoint: "127.0.0.1:9001", Up: true},
		{Upstream: "u1", Endpoint: "127.0.0.1:9002", Up: false},
	}
	var states atomic.Pointer[[]apiv1.EndpointState]
	states.Store(&allUp)
	h.src.Endpoints = func() []apiv1.EndpointState { return *states.Load() }
	// Beats often; the test waits for the heartbeat that carries the
	// change, whenever it comes.
	h.src.Heartbeat = 20 * time.Millisecond
	// Announce the endpoint states of every heartbeat-only update.
	beats := heartbeats(t, h.url, "NEW.endpoints::text")
	publish(t, h.store, 1)
	h.start(t)
	h.src.Notify()
	h.waitApplied(t, 1)
	// The apply recorded the states of that moment (its notification and
	// the row are one transaction, and no heartbeat changes them).
	gws, err := h.store.ListGateways(context.Background(), true)
	if err != nil || len(gws) != 1 || !slices.Equal(gws[0].Endpoints, allUp) {
		t.Fatalf("gateways after apply = %+v, %v; want gw-test with %+v", gws, err, allUp)
	}

	// An endpoint goes down: the next heartbeats record it.
	states.Store(&oneDown)
	timeout := time.After(testrun.Timeout)
	for {
		var payload string
		select {
		case payload = <-beats:
		case <-timeout:
			t.Fatalf("no heartbeat recorded %+v within %v", oneDown, testrun.Timeout)
		}
		var got []apiv1.EndpointState
		if err := json.Unmarshal([]byte(payload), &got); err != nil {
			t.Fatalf("heartbeat endpoints %q: %v", payload, err)
		}
		if slices.Equal(got, oneDown) {
			break
		}
		if !slices.Equal(got, allUp) {
			t.Fatalf("heartbeat recorded %+v, want %+v or %+v", got, allUp, oneDown)
		}
	}
	gws, err = h.store.ListGateways(context.Background(), true)
	if err != nil || len(gws) != 1 || gws[0].AppliedGeneration != 1 || !slices.Equal(gws[0].Endpoints, oneDown) {
		t.Errorf("gateways after the heartbeat = %+v, %v; want generation 1 with %+v", gws, err, oneDown)
	}
}

func TestDatabaseWithoutEndpointsRecordsEmptyList(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil) // Endpoints nil
	publish(t, h.store, 1)
	h.start(t)
	h.src.Notify()
	h.waitApplied(t, 1)
	gws, err := h.store.ListGateways(context.Background(), true)
	if err != nil || len(gws) != 1 || gws[0].Endpoints == nil || len(gws[0].Endpoints) != 0 {
		t.Errorf("gateways = %+v, %v; want gw-test with an empty endpoint list", gws, err)
	}
}

func TestDatabaseMisconfigured(t *testing.T) {
	t.Parallel()
	src := &source.Database{}
	if err := src.Run(context.Background()); err == nil {
		t.Error("Run without Store and Apply = nil, want an error")
	}
}

// TestDatabaseNotifyNeverBlocks calls Notify from many goroutines, before
// any Run: every call returns, since pending triggers collapse into one.
func TestDatabaseNotifyNeverBlocks(t *testing.T) {
	t.Parallel()
	src := &source.Database{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				src.Notify()
			}
		})
	}
	wg.Wait()
}

func TestDatabaseKeepsRetryingWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	// Every connection is refused.
	s, err := db.Open(context.Background(), fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", testnet.ClosedAddr(t)))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)

	logs := make(chan string, 1000)
	src := &source.Database{
		Store: s,
		Apply: func(context.Context, *config.Spec, int64) error {
			t.Error("Apply called without a database")
			return nil
		},
		Resync: time.Hour,
		Logger: testlog.New(t, logs),
	}
	stop := testrun.Background(t, src.Run)
	src.Notify()
	// One trigger, two failed loads: the retry needs no further trigger.
	testlog.Wait(t, logs, "load newest generation failed")
	testlog.Wait(t, logs, "load newest generation failed")
	expectNotReady(t, src, "without a database")
	stop() // Run must return nil after cancel
	if got := src.Applied(); got != 0 {
		t.Errorf("Applied() = %d, want 0", got)
	}
}

// TestDatabaseSkipsWhatIsServed: a generation the data plane already serves
// (in serve, applied by the API before its 201) is recorded as applied but
// neither decoded nor applied again; the next one is.
func TestDatabaseSkipsWhatIsServed(t *testing.T) {
	t.Parallel()
	h := newDatabase(t, nil)
	var serving atomic.Int64
	h.src.Serving = serving.Load
	for i := 1; i <= 2; i++ {
		publish(t, h.store, i)
	}
	serving.Store(2) // the data plane has generation 2 from elsewhere
	h.start(t)
	h.src.Notify()
	testrun.Recv(t, h.src.Ready(), "ready")
	h.waitReport(t, 2)
	if got := h.src.Applied(); got != 2 {
		t.Errorf("Applied() = %d, want 2", got)
	}
	publish(t, h.store, 3)
	h.src.Notify()
	h.waitApplied(t, 3) // fails if 1 or 2 was applied first
	if ids := h.order.snapshot(); len(ids) != 1 || ids[0] != 3 {
		t.Errorf("Apply saw %v, want only [3]", ids)
	}
}

// heartbeats announces every heartbeat-only update of gateway_instances in
// url's database (the applied generation unchanged, the heartbeat newer)
// and returns the announcements: the SQL expression payload evaluated on
// the updated row (NEW).
func heartbeats(t *testing.T, url, payload string) <-chan string {
	t.Helper()
	dbtest.Exec(t, url, `
		CREATE FUNCTION test_heartbeat() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_notify('test_heartbeat', `+payload+`);
			RETURN NEW;
		END $$;
		CREATE TRIGGER test_heartbeat AFTER UPDATE ON gateway_instances FOR EACH ROW
			WHEN (OLD.applied_generation = NEW.applied_generation AND OLD.last_heartbeat < NEW.last_heartbeat)
			EXECUTE FUNCTION test_heartbeat()`)
	return dbtest.Watch(t, url, "test_heartbeat")
}
