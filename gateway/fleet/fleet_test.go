package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/internal/testrun"
)

// TestMain fails the package when a part leaves a goroutine behind.
func TestMain(m *testing.M) {
	testrun.Main(m)
}

var analysis = config.CanaryAnalysis{
	Enabled: true, WindowSeconds: 60, Step: 10, MinRequests: 10, CooldownSeconds: 0,
	Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
	Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
}

// canarySpec is service api, 90/10 over api-stable and api-canary, under
// analysis.
func canarySpec() *spectest.Builder {
	return spectest.Canary(90, 10).Analysis(analysis)
}

func publish(t *testing.T, store *db.Store, b *spectest.Builder) int64 {
	t.Helper()
	g, err := store.Publish(context.Background(), db.PublishParams{Spec: b.JSON(), Author: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g.ID
}

// record records a controller action from -> to on service api of gen.
func record(t *testing.T, store *db.Store, gen int64, from, to int) {
	t.Helper()
	ctx := context.Background()
	lock, err := store.TryCanaryLock(ctx)
	if err != nil || lock == nil {
		t.Fatalf("lock: %v, %v", lock, err)
	}
	defer lock.Close(ctx)
	f := apiv1.CanaryFigures{}
	if _, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: gen, Service: "api", FromWeight: from, ToWeight: to,
		Action: apiv1.CanaryPromote, Reason: "test", Baseline: &f, Canary: &f}, 10); !ok || err != nil {
		t.Fatalf("record %d -> %d: %v, %v", from, to, ok, err)
	}
}

// TestFlusherKeepsWhatItCouldNotWrite: a flush that fails keeps its
// aggregates, and the next one that succeeds writes them with what came
// after; a generation no longer served drops its own.
func TestFlusherKeepsWhatItCouldNotWrite(t *testing.T) {
	t.Parallel()
	store, url := dbtest.NewStore(t)
	gen := publish(t, store, canarySpec())
	px := proxy.New(proxy.Options{})
	t.Cleanup(px.Close)
	if err := px.Apply(canarySpec().Parsed(t), gen); err != nil {
		t.Fatal(err)
	}
	_, recs := px.CanaryRecorders()
	if len(recs) != 1 {
		t.Fatalf("recorders %+v, want one group", recs)
	}
	for range 7 {
		recs[0].Canary.Observe(3*time.Millisecond, true)
	}
	recs[0].Baseline.Observe(time.Millisecond, false)

	closed, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	f := &Flusher{Sink: closed, Instance: "i-1", Recorders: px.CanaryRecorders}
	f.pending = make(map[pendingKey]*canary.Stats)
	if err := f.flush(context.Background()); err == nil {
		t.Fatal("flush to a closed store succeeded")
	}
	recs[0].Canary.Observe(5*time.Millisecond, false)
	f.Sink = store
	if err := f.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	base, can, _, err := store.CanaryWindow(context.Background(), gen, "api", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if base.Requests != 1 || base.Errors != 0 || can.Requests != 8 || can.Errors != 7 {
		t.Fatalf("stored baseline %+v, canary %+v; want 1/0 and 8/7", base, can)
	}
	var h canary.Histogram
	if err := h.AddSparse(can.Latency); err != nil || h.Count() != 8 {
		t.Fatalf("canary latencies: %d, %v; want 8", h.Count(), err)
	}
	// Nothing new: nothing written again.
	if err := f.flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, can, _, _ := store.CanaryWindow(context.Background(), gen, "api", time.Minute); can.Requests != 8 {
		t.Fatalf("after an empty flush: canary %d requests, want still 8", can.Requests)
	}
}

// TestOverlay gives a generation the controller changed its weights in
// force, and leaves others alone.
func TestOverlay(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	ctx := context.Background()
	gen := publish(t, store, canarySpec())
	spec := canarySpec().Parsed(t)
	if got, err := Overlay(ctx, store, spec, gen); err != nil || got != spec {
		t.Fatalf("no events: Overlay = %p, %v; want the spec itself", got, err)
	}
	record(t, store, gen, 10, 20)
	record(t, store, gen, 20, 30)
	got, err := Overlay(ctx, store, spec, gen)
	if err != nil {
		t.Fatal(err)
	}
	if ts := got.Services[0].Split.Targets; ts[0].Weight != 70 || ts[1].Weight != 30 {
		t.Fatalf("overlaid targets %+v, want 70/30", ts)
	}
	if ts := spec.Services[0].Split.Targets; ts[0].Weight != 90 {
		t.Fatalf("Overlay changed its argument: %+v", ts)
	}
	// Another generation has none of these.
	gen2 := publish(t, store, canarySpec().Route("other", "/other", "api-stable"))
	if got, err := Overlay(ctx, store, spec, gen2); err != nil || got != spec {
		t.Fatalf("generation %d: Overlay = %p, %v; want the spec itself", gen2, got, err)
	}
}

// TestFollowerAppliesWeightsInForce: a Notify loads the weights in force
// for the generation served and sets them in the proxy.
func TestFollowerAppliesWeightsInForce(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	gen := publish(t, store, canarySpec())
	px := proxy.New(proxy.Options{})
	t.Cleanup(px.Close)
	if err := px.Apply(canarySpec().Parsed(t), gen); err != nil {
		t.Fatal(err)
	}
	loaded := make(chan int64, 10)
	f := &Follower{Store: store, Proxy: px, Loaded: func(g int64) { loaded <- g }}
	testrun.Background(t, f.Run)
	record(t, store, gen, 10, 40)
	f.Notify()
	if g := testrun.Recv(t, loaded, "a load"); g != gen {
		t.Fatalf("loaded generation %d, want %d", g, gen)
	}
	if w, ok := px.CanaryWeight("api"); !ok || w != 40 {
		t.Fatalf("canary weight %d, %v; want 40", w, ok)
	}
}

// TestRunnerLosesTheLockWithItsConnection: terminating the runner's lock
// session makes it give up leading, and it takes the lock again on a new
// session.
func TestRunnerLosesTheLockWithItsConnection(t *testing.T) {
	t.Parallel()
	store, url := dbtest.NewStore(t)
	leading := make(chan bool, 10)
	r := &Runner{Store: store, Instance: "i-1", Interval: 20 * time.Millisecond, LockRetry: 20 * time.Millisecond,
		Leading: func(on bool) { leading <- on }}
	testrun.Background(t, r.Run)
	if !testrun.Recv(t, leading, "leading") {
		t.Fatal("first change: not leading")
	}
	dbtest.Exec(t, url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, db.CanaryRunnerApplicationName)
	if testrun.Recv(t, leading, "lost the lock") {
		t.Fatal("after the kill: still leading")
	}
	if !testrun.Recv(t, leading, "leading again") {
		t.Fatal("not leading again")
	}
}

// A runner that holds the lock but stops renewing its lease (its process
// frozen with SIGSTOP: the session stays open, and with it the advisory
// lock) is taken over by another once the lease has expired: that one
// leads, and the frozen holder's session is gone when it wakes.
func TestRunnerTakesOverFrozenHolder(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	ctx := context.Background()
	frozen, err := store.TryCanaryLease(ctx, "frozen", time.Second)
	if err != nil || frozen == nil {
		t.Fatalf("TryCanaryLease = %v, %v", frozen, err)
	}
	leading := make(chan bool, 4)
	r := &Runner{Store: store, Instance: "i-2", Interval: 50 * time.Millisecond, LockRetry: 50 * time.Millisecond,
		Lease: time.Second, Leading: func(on bool) { leading <- on }}
	testrun.Background(t, r.Run)
	if !testrun.Recv(t, leading, "leading after the frozen holder's lease") {
		t.Fatal("not leading")
	}
	if _, _, err := frozen.Newest(ctx); err == nil {
		t.Error("the frozen holder's session still answers after the takeover")
	}
}
