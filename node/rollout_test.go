package node

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// shopSpec is web on "/" split 90/10 over pools a and b with no analysis,
// and shop on /shop split shopStable/shopCanary over the same pools under
// analysis ca: two services, one canary group (shop).
func shopSpec(a, b *demo.Pool, shopStable, shopCanary int, ca config.CanaryAnalysis) *spectest.Builder {
	return spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).
		Split("shop", "/shop", spectest.T(a.Name, shopStable), spectest.T(b.Name, shopCanary)).
		Analysis(ca)
}

// groupWeightIs reports whether every process shows canary weight w of
// group in dwara_canary_weight.
func groupWeightIs(t *testing.T, group string, w float64, procs ...*proc) bool {
	t.Helper()
	for _, p := range procs {
		if v, ok := scrape(t, metricsAddr(p), "dwara_canary_weight")["group="+group]; !ok || v != w {
			return false
		}
	}
	return true
}

// TestCanaryCarriedOverAnUnrelatedPublish is the case of a rollback undone
// by a publish: shop's canary, failing, is rolled back to 0; the canary is
// healed (so a canary put back at 10% would be promoted, not rolled back
// again) and the unrelated service web is flipped. The flip's generation
// keeps shop's canary at 0 on both proxies: every /shop request answered by
// the baseline, shop's state carried over, no event recorded since, the
// flip's diff naming no canary reset. A dry run and a publish that change
// shop's weights name shop in canary_reset and start it afresh at its new
// configured weight.
func TestCanaryCarriedOverAnUnrelatedPublish(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	store := openTestStore(t, url)
	a, b := pools(t)
	b.SetFailRate(0.3)
	serve, replica := canaryProcs(t, "", url, nil)
	ca := analysis(10, 100, 0)
	g := publish(t, serve.Admin, shopSpec(a, b, 90, 10, ca).JSON())
	serve.waitApplied(t, g.ID)
	replica.waitApplied(t, g.ID)

	next := ids(11)
	events := func(gen int64) []apiv1.CanaryEvent {
		es, err := store.ListCanaryEvents(t.Context(), "shop", gen, 500, 0)
		if err != nil {
			t.Fatal(err)
		}
		slices.Reverse(es)
		return es
	}
	deadline := 20000
	for i := 0; len(events(g.ID)) == 0; i++ {
		if i >= deadline {
			t.Fatal("no rollback of shop recorded")
		}
		for range 20 {
			sendAt(t, replica.Proxy, "/shop/", next())
		}
		i += 19
	}
	if es := events(g.ID); es[0].Action != apiv1.CanarySevereRollback || es[0].ToWeight != 0 {
		t.Fatalf("events %+v, want a severe_rollback to 0", es)
	}
	waitUntil(t, "shop at weight 0 on both proxies", func() bool { return groupWeightIs(t, "shop", 0, serve, replica) }, ticks(t, canaryInterval))

	b.SetFailRate(0)
	var flipped apiv1.Generation
	if resp := call(t, http.MethodPost, "http://"+serve.Admin+"/api/v1/services/web/flip", map[string]any{}, &flipped); resp.StatusCode != http.StatusCreated {
		t.Fatalf("flip web: status %d", resp.StatusCode)
	}
	serve.waitApplied(t, flipped.ID)
	replica.waitApplied(t, flipped.ID)
	for _, p := range []*proc{serve, replica} {
		if !groupWeightIs(t, "shop", 0, p) {
			t.Errorf("after the flip of web: %s serves shop's canary at %v, want 0", p.Proxy, scrape(t, metricsAddr(p), "dwara_canary_weight")["group=shop"])
		}
		got := map[string]int{}
		for range 300 {
			pool, status := sendAt(t, p.Proxy, "/shop/", next())
			got[fmt.Sprintf("%s %d", pool, status)]++
		}
		if got["pool-a 200"] != 300 {
			t.Errorf("after the flip of web: /shop answers %v through %s, want all 300 from pool-a", got, p.Proxy)
		}
	}
	states, err := store.CanaryStates(t.Context(), flipped.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := states["shop"]; !st.Transient || st.Weight != 0 || st.LastEvent == nil || st.LastEvent.GenerationID != g.ID {
		t.Errorf("shop's state in generation %d: %+v, want the weight 0 carried over from generation %d", flipped.ID, st, g.ID)
	}
	if es := events(flipped.ID); len(es) != 0 {
		t.Errorf("events in the flip's generation: %+v, want none (a healed canary at 0 is not judged)", es)
	}
	var d apiv1.Diff
	if resp := call(t, http.MethodGet, fmt.Sprintf("http://%s/api/v1/generations/%d/diff", serve.Admin, flipped.ID), nil, &d); resp.StatusCode != http.StatusOK {
		t.Fatalf("diff: status %d", resp.StatusCode)
	}
	if d.CanaryReset == nil || len(d.CanaryReset) != 0 {
		t.Errorf("the flip's diff: canary_reset %v, want []", d.CanaryReset)
	}

	// A publish that changes shop's weights starts its canary afresh, and
	// a dry run says so first.
	changed := shopSpec(a, b, 80, 20, analysis(10, 1_000_000, 0)).JSON()
	var dry apiv1.DryRunResult
	if resp := call(t, http.MethodPost, "http://"+serve.Admin+"/api/v1/generations?dry_run=true", map[string]any{"spec": json.RawMessage(changed)}, &dry); resp.StatusCode != http.StatusOK {
		t.Fatalf("dry run: status %d", resp.StatusCode)
	}
	if !slices.Equal(dry.Impact.CanaryReset, []string{"shop"}) {
		t.Errorf("dry run: canary_reset %v, want [shop]", dry.Impact.CanaryReset)
	}
	g3 := publish(t, serve.Admin, changed)
	serve.waitApplied(t, g3.ID)
	replica.waitApplied(t, g3.ID)
	waitUntil(t, "shop afresh at weight 20 on both proxies", func() bool { return groupWeightIs(t, "shop", 20, serve, replica) }, ticks(t, canaryInterval))
	if states, err = store.CanaryStates(t.Context(), g3.ID); err != nil {
		t.Fatal(err)
	}
	if st, ok := states["shop"]; ok && st.Transient {
		t.Errorf("shop's state in generation %d: %+v, want none (afresh)", g3.ID, st)
	}
}

// TestCanaryScheduleHoldsAndGate runs the schedule 10 -> 25 -> 50 -> 100
// with a 2 s hold at each step (after a 1 s cooldown) and a gate before
// 100 on healthy traffic:
// the events, as the database recorded them, are hold, promote, hold,
// promote, hold, gate, in that order, each promote at least hold_seconds
// after the hold before it; the gate waits (more traffic moves nothing,
// GET /api/v1/canary shows it waiting) until POST .../canary/promote,
// which is refused with 409 while no gate waits; the operator's promote is
// recorded with its actor and takes both proxies to 100.
func TestCanaryScheduleHoldsAndGate(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	store := openTestStore(t, url)
	a, b := pools(t)
	serve, replica := canaryProcs(t, "", url, nil)
	const hold = 2
	ca := analysis(0, 50, 1)
	ca.Steps, ca.HoldSeconds, ca.Gate = []int{10, 25, 50, 100}, hold, config.GateFinal
	g := publish(t, serve.Admin, canarySpec(a, b, ca))
	serve.waitApplied(t, g.ID)
	replica.waitApplied(t, g.ID)
	promoteURL := "http://" + serve.Admin + "/api/v1/services/web/canary/promote"
	if resp := call(t, http.MethodPost, promoteURL, map[string]any{}, nil); resp.StatusCode != http.StatusConflict {
		t.Fatalf("promote with no gate waiting: status %d, want 409", resp.StatusCode)
	}

	next := ids(12)
	waiting := func() bool {
		es := canaryEvents(t, store, g.ID)
		return len(es) > 0 && es[len(es)-1].Action == apiv1.CanaryGate
	}
	sendUntil(t, replica.Proxy, next, 100000, "a gate waiting", waiting)
	var got []string
	var holdAt time.Time
	for i, e := range canaryEvents(t, store, g.ID) {
		switch e.Action {
		case apiv1.CanaryHoldReset:
			continue // a clean run broken (too few requests at first): the next hold restarts it
		case apiv1.CanaryHold:
			holdAt = e.CreatedAt
		case apiv1.CanaryPromote:
			if d := e.CreatedAt.Sub(holdAt); holdAt.IsZero() || d < hold*time.Second {
				t.Errorf("event %d: promote %d -> %d %v after its hold started, want at least %ds", i, e.FromWeight, e.ToWeight, d, hold)
			}
		}
		if e.Reason == "" {
			t.Errorf("event %d (%s) has no reason", i, e.Action)
		}
		got = append(got, fmt.Sprintf("%s %d->%d", e.Action, e.FromWeight, e.ToWeight))
	}
	want := []string{"hold 10->10", "promote 10->25", "hold 25->25", "promote 25->50", "hold 50->50", "gate 50->50"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}

	// The gate waits: more clean traffic moves nothing.
	waitWeight(t, 50, serve, replica)
	shares(t, 300, next, replica)
	var list apiv1.CanaryList
	call(t, http.MethodGet, "http://"+serve.Admin+"/api/v1/canary", nil, &list)
	if len(list.Items) != 1 || !list.Items[0].GateWaiting || list.Items[0].Weights != [2]int{50, 50} {
		t.Fatalf("canary groups %+v, want web waiting at its gate at 50/50", list.Items)
	}
	if es := canaryEvents(t, store, g.ID); len(es) != len(want) {
		t.Fatalf("with the gate waiting, %d events, want %d: %+v", len(es), len(want), es[len(want):])
	}

	var after apiv1.CanaryGroup
	if resp := call(t, http.MethodPost, promoteURL, map[string]any{"message": "looks good"}, &after); resp.StatusCode != http.StatusOK {
		t.Fatalf("promote through the gate: status %d", resp.StatusCode)
	}
	if after.Weights != [2]int{0, 100} || after.GateWaiting || after.State != apiv1.CanaryComplete {
		t.Errorf("after the promote: %+v, want complete at 0/100", after)
	}
	es := canaryEvents(t, store, g.ID)
	if e := es[len(es)-1]; e.Action != apiv1.CanaryPromote || e.FromWeight != 50 || e.ToWeight != 100 || e.Actor == "" || !strings.Contains(e.Reason, "looks good") {
		t.Errorf("the gate's event: %+v, want a promote 50 -> 100 with its actor and message", e)
	}
	waitWeight(t, 100, serve, replica)
	if resp := call(t, http.MethodPost, promoteURL, map[string]any{}, nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("a second promote: status %d, want 409", resp.StatusCode)
	}
}

// TestCanaryRelativeJudgement splits 50/50 with the baseline failing 3% of
// its requests (deterministically spread) and rolls back only relative to
// it (rollback.relative.factor 2, no absolute threshold; promote under
// 0.1%, so nothing is promoted): a canary at 4% is judged on windows of
// at least 400 canary requests (min_requests; a 120 s window, so that a
// busy machine's request rate gets there) and not rolled back; at 7% it is rolled
// back by step, 50 -> 40, the event naming rollback.relative with the
// baseline's rate, the factor and the bound it used. The counters of the
// group exist at 0 in both processes (leading or not) before that first
// rollback, so increase() over the metrics text shows it: 1 rollback
// across the two, 0 promotions.
func TestCanaryRelativeJudgement(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	store := openTestStore(t, url)
	a, b := pools(t)
	a.SetFailRate(0.03)
	b.SetFailRate(0.04)
	serve, replica := canaryProcs(t, "", url, nil)
	// A cooldown of a minute: after the first rollback nothing more
	// moves while the test looks.
	ca := analysis(10, 400, 60)
	ca.WindowSeconds = 120
	ca.Promote.Threshold = 0.001
	ca.Rollback = config.Threshold{Metric: config.MetricErrorRate, Relative: &config.Relative{Factor: 2}}
	g := publish(t, serve.Admin, spectest.SplitOver([]*demo.Pool{a, b}, 50, 50).Analysis(ca).JSON())
	serve.waitApplied(t, g.ID)
	replica.waitApplied(t, g.ID)

	counters := func() (rollbacks, promotions float64, both bool) {
		both = true
		for _, p := range []*proc{serve, replica} {
			r, rok := scrape(t, metricsAddr(p), "dwara_canary_rollbacks_total")["group=web"]
			pr, pok := scrape(t, metricsAddr(p), "dwara_canary_promotions_total")["group=web"]
			rollbacks, promotions, both = rollbacks+r, promotions+pr, both && rok && pok
		}
		return rollbacks, promotions, both
	}
	waitUntil(t, "both processes show web's counters", func() bool { _, _, both := counters(); return both }, ticks(t, canaryInterval))
	if r, p, _ := counters(); r != 0 || p != 0 {
		t.Fatalf("before any event: %v rollbacks, %v promotions, want both series at 0", r, p)
	}

	next := ids(13)
	judged := func() bool {
		for _, p := range []*proc{serve, replica} {
			if scrape(t, metricsAddr(p), "dwara_canary_window_requests")["group=web,version=canary"] >= 400 {
				return true
			}
		}
		return false
	}
	sendUntilWithin(t, replica.Proxy, next, 20000, 4*wait, "a window of 400 canary requests judged", judged)
	shares(t, 200, next, replica) // and judged again, several times
	if es := canaryEvents(t, store, g.ID); len(es) != 0 {
		t.Fatalf("a canary at 4%% against a baseline at 3%% under factor 2: events %+v, want none", es)
	}

	b.SetFailRate(0.07)
	// The window's canary rate passes twice the baseline's once about two
	// thirds of it is at 7%: twice the requests sent at 4% while those are
	// in the window, else up to 80 s of traffic at any rate.
	sendUntilWithin(t, replica.Proxy, next, 50000, 6*wait, "a rollback", func() bool { return len(canaryEvents(t, store, g.ID)) > 0 })
	e := canaryEvents(t, store, g.ID)[0]
	f := e.RuleFigures
	if e.Action != apiv1.CanaryRollback || e.FromWeight != 50 || e.ToWeight != 40 || e.Rule != "rollback.relative" {
		t.Fatalf("event %+v, want a rollback 50 -> 40 by rollback.relative", e)
	}
	if f["factor"] != 2 || f["baseline"] < 0.029 || f["baseline"] > 0.031 || f["bound"] != 2*f["baseline"] || !(f["canary"] > f["bound"]) {
		t.Errorf("rule figures %v, want factor 2, baseline 0.03, bound twice it, the canary above it", f)
	}
	waitWeight(t, 40, serve, replica)
	if r, p, _ := counters(); r != 1 || p != 0 {
		t.Errorf("after the rollback: %v rollbacks, %v promotions across the processes, want an increase of 1 and 0", r, p)
	}
}

// hookServer is a webhook receiver on loopback: /confirm answers with the
// status in confirm, /hang answers 200 once hangs is false and until then
// holds the call until its caller gives up, /events keeps every call it
// gets, in order.
type hookServer struct {
	url     string
	confirm atomic.Int32
	hangs   atomic.Bool
	mu      sync.Mutex
	calls   []apiv1.CanaryWebhookCall
}

func startHookServer(t *testing.T) *hookServer {
	t.Helper()
	h := &hookServer{}
	h.confirm.Store(http.StatusServiceUnavailable)
	h.hangs.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var call apiv1.CanaryWebhookCall
		if err := json.NewDecoder(r.Body).Decode(&call); err != nil || r.Method != http.MethodPost {
			t.Errorf("webhook %s %s: %v", r.Method, r.URL.Path, err)
		}
		switch r.URL.Path {
		case "/confirm":
			w.WriteHeader(int(h.confirm.Load()))
		case "/hang":
			if h.hangs.Load() {
				<-r.Context().Done()
				return
			}
		case "/events":
			h.mu.Lock()
			h.calls = append(h.calls, call)
			h.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// received returns the calls /events got so far.
func (h *hookServer) received() []apiv1.CanaryWebhookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// TestCanaryWebhooks promotes a healthy canary 10 -> 40 -> 70 -> 100 under
// two confirm_promotion hooks and an event hook. While one confirm hook
// answers 503 and the other hangs past its 1 s timeout, nothing is
// promoted, and both failures are recorded beside the events (503; no
// answer within 1 s after 2 attempts) while the runner goes on (each
// failed check recorded again after its recheck). Once both answer 200 the
// rollout completes, and the event hook has got every event of the group,
// in the order recorded, each with its text.
func TestCanaryWebhooks(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	store := openTestStore(t, url)
	a, b := pools(t)
	hs := startHookServer(t)
	serve, replica := canaryProcs(t, "", url, nil)
	ca := analysis(30, 50, 1)
	ca.Webhooks = []config.Webhook{
		{Name: "smoke", Type: config.WebhookConfirmPromotion, URL: hs.url + "/confirm", TimeoutS: 1},
		{Name: "slow", Type: config.WebhookConfirmPromotion, URL: hs.url + "/hang", TimeoutS: 1},
		{Name: "chat", Type: config.WebhookEvent, URL: hs.url + "/events"},
	}
	g := publish(t, serve.Admin, canarySpec(a, b, ca))
	serve.waitApplied(t, g.ID)
	replica.waitApplied(t, g.ID)

	next := ids(14)
	results := func(name string) []apiv1.CanaryWebhookResult {
		var rs []apiv1.CanaryWebhookResult
		for _, e := range canaryEvents(t, store, g.ID) {
			if e.Action == apiv1.CanaryWebhook && e.Webhook != nil && e.Webhook.Name == name {
				rs = append(rs, *e.Webhook)
			}
		}
		return rs
	}
	sendUntil(t, replica.Proxy, next, 100000, "each confirm hook failed twice", func() bool {
		return len(results("smoke")) >= 2 && len(results("slow")) >= 2
	})
	for _, e := range canaryEvents(t, store, g.ID) {
		if e.Action == apiv1.CanaryPromote {
			t.Fatalf("promoted with its confirm hooks failing: %+v", e)
		}
	}
	if r := results("smoke")[0]; r.OK || r.Status != http.StatusServiceUnavailable || r.Type != config.WebhookConfirmPromotion {
		t.Errorf("smoke's result %+v, want a failed 503", r)
	}
	if r := results("slow")[0]; r.OK || r.Status != 0 || r.Attempts != 2 || !strings.Contains(r.Error, "no answer within 1 s") {
		t.Errorf("slow's result %+v, want a timeout after 2 attempts", r)
	}

	hs.confirm.Store(http.StatusOK)
	hs.hangs.Store(false)
	sendUntil(t, replica.Proxy, next, 100000, "promoted to 100", func() bool {
		es := canaryEvents(t, store, g.ID)
		for _, e := range es {
			if e.Action == apiv1.CanaryPromote && e.ToWeight == 100 {
				return true
			}
		}
		return false
	})
	waitWeight(t, 100, serve, replica)
	var want []int64
	for _, e := range canaryEvents(t, store, g.ID) {
		if e.Action != apiv1.CanaryWebhook {
			want = append(want, e.ID)
		}
	}
	if len(want) != 3 {
		t.Errorf("%d events, want the 3 promotions", len(want))
	}
	waitUntil(t, "the event hook got every event", func() bool { return len(hs.received()) >= len(want) }, ticks(t, canaryInterval))
	var got []int64
	for _, c := range hs.received() {
		if c.Event == nil || c.Text == "" || c.Service != "web" || c.Type != config.WebhookEvent || c.Name != "chat" || c.GenerationID != g.ID {
			t.Fatalf("event hook call %+v", c)
		}
		if c.Weights != [2]int{100 - c.Event.ToWeight, c.Event.ToWeight} {
			t.Errorf("call of event %d: weights %v", c.Event.ID, c.Weights)
		}
		got = append(got, c.Event.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("the event hook got events %v, want %v in that order", got, want)
	}
}
