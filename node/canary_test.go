package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/teststat"
)

// canaryInterval is how often the processes of these tests flush their
// windows and judge: short, so a rollout takes seconds.
const canaryInterval = 50 * time.Millisecond

// analysis is the canary analysis of these tests' service web: window
// 30 s, error_rate promote under 1%, roll back above 5% (severe above 10%).
func analysis(step, minRequests, cooldown int) config.CanaryAnalysis {
	return config.CanaryAnalysis{
		Enabled: true, WindowSeconds: 30, Step: step, MinRequests: minRequests, CooldownSeconds: cooldown,
		Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
	}
}

// canarySpec splits service web on "/" 90/10 between pool a (baseline) and
// pool b (canary) under analysis ca.
func canarySpec(a, b *demo.Pool, ca config.CanaryAnalysis) json.RawMessage {
	return spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).Analysis(ca).JSON()
}

// canaryProcs starts dwara serve and one gateway replica on the database
// at url, both judging and flushing every canaryInterval.
func canaryProcs(t *testing.T, front, url string, leading func(string, bool)) (serve, replica *proc) {
	t.Helper()
	sc := ServeConfig{Front: front, DatabaseURL: url}
	sc.CanaryInterval, sc.CanaryLockRetry = canaryInterval, 4*canaryInterval
	if leading != nil {
		sc.CanaryLeading = func(on bool) { leading("serve", on) }
	}
	serve = startServe(t, sc)
	gc := GatewayConfig{Front: front, DatabaseURL: url}
	gc.CanaryInterval, gc.CanaryLockRetry = canaryInterval, 4*canaryInterval
	if leading != nil {
		gc.CanaryLeading = func(on bool) { leading("replica", on) }
	}
	replica = startGateway(t, gc)
	return serve, replica
}

// openTestStore opens a store on the database at url until the test ends.
func openTestStore(t *testing.T, url string) *db.Store {
	t.Helper()
	store, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	return store
}

// ids returns request ids from a fixed seed, so the split of the requests
// a test sends is the same on every run.
func ids(seed uint64) func() string {
	r := rand.New(rand.NewPCG(seed, seed))
	return func() string { return fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()) }
}

// send sends one GET / with request id id through the proxy at addr and
// returns the pool that answered ("" for an answer without X-Pool) and the
// status.
func send(t *testing.T, addr, id string) (string, int) {
	t.Helper()
	return sendAt(t, addr, "/", id)
}

// sendAt sends one GET path with request id id through the proxy at addr
// and returns the pool that answered ("" for an answer without X-Pool) and
// the status.
func sendAt(t *testing.T, addr, path, id string) (string, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Header.Set("X-Request-Id", id)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", path, addr, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get("X-Pool"), resp.StatusCode
}

// sendUntil sends requests through addr (ids from next) until done holds,
// checking it every 20 requests; it fails the test after max requests or
// wait.
func sendUntil(t *testing.T, addr string, next func() string, max int, what string, done func() bool) {
	t.Helper()
	sendUntilWithin(t, addr, next, max, wait, what, done)
}

// sendUntilWithin is sendUntil bounded by within instead of wait, for a
// condition that needs a window's worth of time on a busy machine.
func sendUntilWithin(t *testing.T, addr string, next func() string, max int, within time.Duration, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for i := 0; ; i++ {
		if i%20 == 0 && done() {
			return
		}
		if i >= max || time.Now().After(deadline) {
			t.Fatalf("%s: not after %d requests", what, i)
		}
		send(t, addr, next())
	}
}

// events returns the canary events of service web, oldest first.
func canaryEvents(t *testing.T, store *db.Store, generation int64) []apiv1.CanaryEvent {
	t.Helper()
	es, err := store.ListCanaryEvents(context.Background(), "web", generation, 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(es)
	return es
}

// promotionChain checks that es are the promotions 10 -> 20 -> ... -> 100,
// each starting where the previous one ended (no action twice), and
// returns the number of instances that recorded them.
func promotionChain(t *testing.T, es []apiv1.CanaryEvent) int {
	t.Helper()
	instances := map[string]bool{}
	w := 10
	for i, e := range es {
		if e.Action != apiv1.CanaryPromote || e.FromWeight != w || e.ToWeight != w+10 {
			t.Errorf("event %d: %s %d -> %d, want promote %d -> %d", i, e.Action, e.FromWeight, e.ToWeight, w, w+10)
		}
		w = e.ToWeight
		instances[e.InstanceID] = true
	}
	if w != 100 || len(es) != 9 {
		t.Errorf("%d events ending at %d, want 9 ending at 100", len(es), w)
	}
	return len(instances)
}

// weightIs reports whether every process shows canary weight w of group
// web in dwara_canary_weight.
func weightIs(t *testing.T, w float64, procs ...*proc) bool {
	t.Helper()
	for _, p := range procs {
		if v, ok := scrape(t, metricsAddr(p), "dwara_canary_weight")["group=web"]; !ok || v != w {
			return false
		}
	}
	return true
}

// ticks returns a channel that receives every d until the test ends.
func ticks(t *testing.T, d time.Duration) <-chan struct{} {
	ch := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				select {
				case ch <- struct{}{}:
				case <-done:
					return
				}
			}
		}
	}()
	return ch
}

// waitWeight waits until every process serves canary weight w.
func waitWeight(t *testing.T, w float64, procs ...*proc) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("every process at canary weight %v", w), func() bool { return weightIs(t, w, procs...) }, ticks(t, canaryInterval))
}

// shares sends n requests with ids from next through each process and
// returns the answers per pool.
func shares(t *testing.T, n int, next func() string, procs ...*proc) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, p := range procs {
		for range n {
			pool, status := send(t, p.Proxy, next())
			got[fmt.Sprintf("%s %d", pool, status)]++
		}
	}
	return got
}

// TestCanaryRolledBackAcrossTheFleet runs dwara serve and one replica on
// one database and sends traffic to the replica only, while the canary
// pool fails 20% of its requests. The fleet's runner must roll the canary
// straight back to 0 (20% is over twice the 5% threshold), record the
// event with its figures, and both proxies must serve the rolled-back
// weights: every request to pool a. Adopting turns the transient weights
// into a generation; publishing another generation reverts to its own
// weights, measured by a chi-square test at p = 0.001.
func TestCanaryRolledBackAcrossTheFleet(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		store := openTestStore(t, url)
		a, b := pools(t)
		b.SetFailRate(0.2)
		serve, replica := canaryProcs(t, front, url, nil)
		g := publish(t, serve.Admin, canarySpec(a, b, analysis(10, 200, 0)))
		serve.waitApplied(t, g.ID)
		replica.waitApplied(t, g.ID)

		next := ids(1)
		sendUntil(t, replica.Proxy, next, 20000, "a rollback recorded", func() bool {
			return len(canaryEvents(t, store, g.ID)) > 0
		})
		es := canaryEvents(t, store, g.ID)
		e := es[len(es)-1]
		if e.Action != apiv1.CanarySevereRollback || e.FromWeight != 10 || e.ToWeight != 0 {
			t.Fatalf("events %+v, want one severe_rollback 10 -> 0", es)
		}
		if e.Canary == nil || e.Baseline == nil || e.PValue == nil {
			t.Fatalf("event without figures: %+v", e)
		}
		if e.Baseline.Requests+e.Canary.Requests < 200 || e.Canary.ErrorRate <= 0.1 || e.Baseline.ErrorRate != 0 {
			t.Errorf("figures: baseline %+v, canary %+v; want >= 200 requests, canary error rate > 0.1, baseline 0", *e.Baseline, *e.Canary)
		}
		if *e.PValue < 0 || *e.PValue > 1 || e.InstanceID == "" || e.Reason == "" {
			t.Errorf("p-value %v, instance %q, reason %q", *e.PValue, e.InstanceID, e.Reason)
		}

		waitWeight(t, 0, serve, replica)
		if got := shares(t, 200, next, serve, replica); got["pool-a 200"] != 400 {
			t.Fatalf("after the rollback: answers %v, want all 400 from pool-a", got)
		}

		// Adopt: the transient weights become a generation.
		var adopted apiv1.Generation
		if resp := call(t, http.MethodPost, "http://"+serve.Admin+"/api/v1/services/web/canary/adopt", map[string]any{"message": "keep it off"}, &adopted); resp.StatusCode != http.StatusCreated {
			t.Fatalf("adopt: status %d", resp.StatusCode)
		}
		spec, err := config.Parse(adopted.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if ts := spec.Services[0].Split.Targets; adopted.Action != apiv1.ActionAdopt || ts[0].Weight != 100 || ts[1].Weight != 0 {
			t.Fatalf("adopted generation %d: action %s, targets %+v; want adopt with 100/0", adopted.ID, adopted.Action, ts)
		}

		// Publishing reverts to the generation's own weights: 90/10 again, with
		// the canary healed and the analysis holding still (min_requests out of
		// reach).
		b.SetFailRate(0)
		g3 := publish(t, serve.Admin, canarySpec(a, b, analysis(10, 1_000_000, 0)))
		serve.waitApplied(t, g3.ID)
		replica.waitApplied(t, g3.ID)
		waitWeight(t, 10, serve, replica)
		for _, p := range []*proc{serve, replica} {
			got := shares(t, 2000, next, p)
			counts := []int{got["pool-a 200"], got["pool-b 200"]}
			if counts[0]+counts[1] != 2000 {
				t.Fatalf("answers %v, want 2000 answered 200", got)
			}
			if chi := teststat.ChiSquare(counts, []int{90, 10}); chi > teststat.Critical001[1] {
				t.Errorf("after publishing: %v against 90/10: chi-square %.2f > %.2f", counts, chi, teststat.Critical001[1])
			}
		}
		if es := canaryEvents(t, store, g3.ID); len(es) != 0 {
			t.Errorf("generation %d has events %+v, want none", g3.ID, es)
		}
	})
}

// TestCanaryPromotedStepByStep sends healthy traffic to the replica: the
// canary is promoted 10 -> 40 -> 70 -> 100 with at least the cooldown
// between actions, nothing after it is complete, and both proxies then
// send everything to the canary.
func TestCanaryPromotedStepByStep(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		store := openTestStore(t, url)
		a, b := pools(t)
		serve, replica := canaryProcs(t, front, url, nil)
		const cooldown = 1
		g := publish(t, serve.Admin, canarySpec(a, b, analysis(30, 50, cooldown)))
		serve.waitApplied(t, g.ID)
		replica.waitApplied(t, g.ID)

		next := ids(2)
		sendUntil(t, replica.Proxy, next, 50000, "promoted to 100", func() bool {
			es := canaryEvents(t, store, g.ID)
			return len(es) > 0 && es[len(es)-1].ToWeight == 100
		})
		waitWeight(t, 100, serve, replica)
		// Complete: more traffic changes nothing.
		shares(t, 300, next, replica)
		es := canaryEvents(t, store, g.ID)
		var steps [][2]int
		for i, e := range es {
			if e.Action != apiv1.CanaryPromote {
				t.Errorf("event %d: %s, want promote", i, e.Action)
			}
			steps = append(steps, [2]int{e.FromWeight, e.ToWeight})
			if i > 0 && e.CreatedAt.Sub(es[i-1].CreatedAt) < cooldown*time.Second {
				t.Errorf("events %d and %d %v apart, within the %ds cooldown", i-1, i, e.CreatedAt.Sub(es[i-1].CreatedAt), cooldown)
			}
		}
		if want := [][2]int{{10, 40}, {40, 70}, {70, 100}}; !slices.Equal(steps, want) {
			t.Fatalf("steps %v, want %v", steps, want)
		}
		if got := shares(t, 200, next, serve, replica); got["pool-b 200"] != 400 {
			t.Fatalf("complete: answers %v, want all 400 from pool-b", got)
		}
	})
}

// TestCanaryRunnerHandover stops the process whose runner holds the lock in
// the middle of a promotion: the other process takes the lock and the
// rollout continues to 100, with every event starting where the previous
// one ended (no action twice) and both processes having acted.
func TestCanaryRunnerHandover(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		url := dbtest.New(t)
		store := openTestStore(t, url)
		a, b := pools(t)
		var mu sync.Mutex
		leaders := map[string]bool{}
		leadingChanged := make(chan struct{}, 1)
		serve, replica := canaryProcs(t, front, url, func(who string, on bool) {
			mu.Lock()
			leaders[who] = on
			mu.Unlock()
			select {
			case leadingChanged <- struct{}{}:
			default:
			}
		})
		leader := func() string {
			mu.Lock()
			defer mu.Unlock()
			for who, on := range leaders {
				if on {
					return who
				}
			}
			return ""
		}
		waitUntil(t, "a runner holds the lock", func() bool { return leader() != "" }, leadingChanged)
		first := leader()
		procs := map[string]*proc{"serve": serve, "replica": replica}
		other := map[string]string{"serve": "replica", "replica": "serve"}[first]

		g := publish(t, serve.Admin, canarySpec(a, b, analysis(10, 50, 1)))
		serve.waitApplied(t, g.ID)
		replica.waitApplied(t, g.ID)
		next := ids(3)
		// Traffic goes through the process that stays.
		sendUntil(t, procs[other].Proxy, next, 50000, "two promotions", func() bool {
			return len(canaryEvents(t, store, g.ID)) >= 2
		})
		procs[first].stop()
		waitUntil(t, "the other runner takes the lock", func() bool { return leader() == other }, leadingChanged)
		sendUntil(t, procs[other].Proxy, next, 100000, "promoted to 100", func() bool {
			es := canaryEvents(t, store, g.ID)
			return len(es) > 0 && es[len(es)-1].ToWeight == 100
		})

		es := canaryEvents(t, store, g.ID)
		instances := promotionChain(t, es)
		if instances != 2 {
			t.Errorf("events recorded by %d instances, want both processes", instances)
		}
	})
}
