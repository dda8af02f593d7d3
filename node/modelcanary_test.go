package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/fakeai"
)

// modelGroup is the canary group of these tests: alias chat of service
// llm.
const modelGroup = "llm/chat"

// errorRateAnalysis is the canary_analysis of TestModelCanary: a 60 s
// window, min_requests 200, roll back above an error rate of 5% (straight
// to 0 above 10%), never promote (below 0), a cooldown of a minute.
const errorRateAnalysis = `{
        "enabled": true, "window_seconds": 60, "step": 10, "min_requests": 200, "cooldown_seconds": 60,
        "promote": {"metric": "error_rate", "threshold": 0},
        "rollback": {"metric": "error_rate", "threshold": 0.05}
      }`

// modelCanarySpec routes alias chat of service llm (base path /v1) 90/10
// between the fake upstreams base (model m-base) and cand (model m-cand)
// under the canary analysis analysis (a JSON object).
func modelCanarySpec(base, cand, analysis string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{
  "upstreams": [
    {"name": "base", "endpoints": [%q]},
    {"name": "cand", "endpoints": [%q]}
  ],
  "services": [{
    "name": "llm", "base_path": "/v1", "upstream": "base",
    "models": [{
      "alias": "chat",
      "targets": [{"upstream": "base", "model": "m-base", "weight": 90}, {"upstream": "cand", "model": "m-cand", "weight": 10}],
      "canary_analysis": %s
    }]
  }]
}`, base, cand, analysis))
}

// modelFleet is dwara serve and a replica sharing one database, both
// serving modelCanarySpec with a fresh baseline fake and the test's
// canary fake, llm/chat at weight 10 on both.
type modelFleet struct {
	store          *db.Store
	serve, replica *proc
	g              apiv1.Generation
	next           func() string
}

// startModelFleet starts a modelFleet whose canary fake has options cand
// and whose alias is judged by analysis, and waits until both processes
// serve llm/chat at weight 10.
func startModelFleet(t *testing.T, cand fakeai.Options, analysis string) *modelFleet {
	t.Helper()
	url := dbtest.New(t)
	f := &modelFleet{store: openTestStore(t, url), next: ids(25)}
	base := fakeAI(t, fakeai.Options{Name: "base", Seed: 3, Events: 2})
	f.serve, f.replica = canaryProcs(t, "", url, nil)
	f.g = publish(t, f.serve.Admin, modelCanarySpec(base, fakeAI(t, cand), analysis))
	f.serve.waitApplied(t, f.g.ID)
	f.replica.waitApplied(t, f.g.ID)
	f.waitWeight(t, 10)
	return f
}

// modelWeightIs reports whether every process serves llm/chat at canary
// weight w.
func modelWeightIs(t *testing.T, w float64, procs ...*proc) bool {
	t.Helper()
	for _, p := range procs {
		if v, ok := scrape(t, metricsAddr(p), "dwara_canary_weight")["group="+modelGroup]; !ok || v != w {
			return false
		}
	}
	return true
}

// waitWeight waits until both processes serve llm/chat at canary weight w.
func (f *modelFleet) waitWeight(t *testing.T, w float64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("both processes at weight %v of %s", w, modelGroup), func() bool {
		return modelWeightIs(t, w, f.serve, f.replica)
	}, ticks(t, canaryInterval))
}

// sendUntil sends streamed chats through the replica until done (asked
// every 20 requests) and fails the test after max requests without it.
func (f *modelFleet) sendUntil(t *testing.T, max int, what string, done func() bool) {
	t.Helper()
	for i := 0; ; i++ {
		if i%20 == 0 && done() {
			return
		}
		if i >= max {
			t.Fatalf("%s: not after %d requests", what, i)
		}
		sendChat(t, f.replica.Proxy, f.next())
	}
}

// judged reports whether a process's window of llm/chat, as last judged,
// holds at least n requests.
func (f *modelFleet) judged(t *testing.T, n float64) bool {
	t.Helper()
	for _, p := range []*proc{f.serve, f.replica} {
		m := scrape(t, metricsAddr(p), "dwara_canary_window_requests")
		if m["group="+modelGroup+",version=baseline"]+m["group="+modelGroup+",version=canary"] >= n {
			return true
		}
	}
	return false
}

// severeRollback sends chats until an event of llm/chat is recorded (at
// most max), fails t unless it is a severe_rollback from 10 to 0, waits
// until both processes serve weight 0 and checks that the canary model
// then gets no request; it returns the event for its figures.
func (f *modelFleet) severeRollback(t *testing.T, max int) apiv1.CanaryEvent {
	t.Helper()
	f.sendUntil(t, max, "a rollback of llm/chat", func() bool { return len(f.events(t)) > 0 })
	e := f.events(t)[0]
	if e.Service != modelGroup || e.Action != apiv1.CanarySevereRollback || e.FromWeight != 10 || e.ToWeight != 0 {
		t.Fatalf("event %+v, want a severe_rollback of %s 10 -> 0", e, modelGroup)
	}
	f.waitWeight(t, 0)
	f.canaryModelUnused(t)
	return e
}

// heldWithoutEvent sends chats until a window of n requests is judged (at
// most max), then more chats, waits until those are judged too (a window
// of n again), and fails t if the canary (what it is) got any event.
func (f *modelFleet) heldWithoutEvent(t *testing.T, n float64, max, more int, what string) {
	t.Helper()
	judged := func() bool { return f.judged(t, n) }
	f.sendUntil(t, max, fmt.Sprintf("a window of %v requests judged", n), judged)
	for range more { // and judged again, several times
		sendChat(t, f.replica.Proxy, f.next())
	}
	waitUntil(t, "the runner judged the last requests", judged, ticks(t, canaryInterval))
	if es := f.events(t); len(es) != 0 {
		t.Fatalf("%s: events %+v, want none", what, es)
	}
}

// events returns the canary events of llm/chat, oldest first.
func (f *modelFleet) events(t *testing.T) []apiv1.CanaryEvent {
	t.Helper()
	return modelEvents(t, f.store, f.g.ID)
}

// canaryModelUnused sends 100 chats through each process and fails the
// test if any reached the canary's upstream.
func (f *modelFleet) canaryModelUnused(t *testing.T) {
	t.Helper()
	for _, p := range []*proc{f.serve, f.replica} {
		before := scrape(t, metricsAddr(p), "dwara_model_requests_total")
		for range 100 {
			sendChat(t, p.Proxy, f.next())
		}
		after := scrape(t, metricsAddr(p), "dwara_model_requests_total")
		for k, v := range after {
			if strings.Contains(k, "upstream=cand") && v != before[k] {
				t.Errorf("%s after the rollback: %s went %v -> %v, want no request to the canary", p.Proxy, k, before[k], v)
			}
		}
	}
}

// fakeAI starts a fake OpenAI-compatible upstream on loopback and returns
// its host:port.
func fakeAI(t *testing.T, o fakeai.Options) string {
	t.Helper()
	srv := httptest.NewServer(fakeai.New(o))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// sendChat sends one streamed chat completion for alias chat with request
// id id through the proxy at addr and returns the status.
func sendChat(t *testing.T, addr, id string) int {
	t.Helper()
	body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", bytes.NewBufferString(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("POST /v1/chat/completions through %s: %v", addr, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// modelEvents returns the canary events of group llm/chat, oldest first.
func modelEvents(t *testing.T, store *db.Store, generation int64) []apiv1.CanaryEvent {
	t.Helper()
	es, err := store.ListCanaryEvents(context.Background(), modelGroup, generation, 500, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(es)
	return es
}

// TestModelCanary is the acceptance of the model canary (issue 25, item
// 3), on dwara serve and a replica sharing one database, traffic sent to
// the replica: an alias at 90/10 whose canary model fails 30% of its
// requests (500) is rolled back straight to 0 by the controller, the
// event named llm/chat, both proxies at weight 0 and every later request
// answered by the baseline's model; one whose canary answers 429 to 30%
// of its requests (and fails none) is judged on windows of min_requests
// and more and not rolled back: a provider's 429 is not a canary error
// (and not a request of the window).
func TestModelCanary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cand     fakeai.Options
		rollback bool
	}{
		{"failing 30%", fakeai.Options{Name: "cand", FailRate: 0.3, Seed: 7, Events: 2}, true},
		{"429 at 30%", fakeai.Options{Name: "cand", RateLimitRate: 0.3, Seed: 7, Events: 2}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startModelFleet(t, tc.cand, errorRateAnalysis)
			store, serve, replica, g := f.store, f.serve, f.replica, f.g
			if tc.rollback {
				e := f.severeRollback(t, 5000)
				if e.Canary == nil || e.Canary.ErrorRate < 0.1 || e.Canary.Requests+e.Baseline.Requests < 200 {
					t.Errorf("event figures baseline %+v canary %+v, want min_requests met and the canary over 10%%", e.Baseline, e.Canary)
				}
				return
			}
			f.heldWithoutEvent(t, 400, 5000, 200, "a canary answering 429 at 30%")
			limited := 0.0
			for k, v := range scrape(t, metricsAddr(replica), "dwara_model_requests_total") {
				if strings.Contains(k, "upstream=cand") && strings.Contains(k, "code=429") {
					limited += v
				}
			}
			if limited < 10 {
				t.Errorf("the canary answered %v 429s, want the 30%% the test is about", limited)
			}
			if !modelWeightIs(t, 10, serve, replica) {
				t.Error("the weight of llm/chat moved without an event")
			}

			// The API lists the group as kind model and addresses it by
			// its name, the slash escaped.
			var list apiv1.CanaryList
			if resp := call(t, http.MethodGet, "http://"+serve.Admin+"/api/v1/canary", nil, &list); resp.StatusCode != http.StatusOK {
				t.Fatalf("GET /api/v1/canary: status %d", resp.StatusCode)
			}
			if len(list.Items) != 1 || list.Items[0].Service != modelGroup || list.Items[0].Kind != apiv1.CanaryKindModel {
				t.Fatalf("GET /api/v1/canary = %+v, want the one group %s of kind model", list.Items, modelGroup)
			}
			var paused apiv1.CanaryGroup
			resp := call(t, http.MethodPost, "http://"+serve.Admin+"/api/v1/services/llm%2Fchat/canary/pause", map[string]any{"message": "look"}, &paused)
			if resp.StatusCode != http.StatusOK || paused.Service != modelGroup || paused.State != apiv1.CanaryPaused {
				t.Fatalf("pause llm%%2Fchat: status %d, group %+v; want 200 and the group paused", resp.StatusCode, paused)
			}
			if es := modelEvents(t, store, g.ID); len(es) != 1 || es[0].Action != apiv1.CanaryPause {
				t.Errorf("events after the pause %+v, want one pause", es)
			}
			if resp := call(t, http.MethodPost, "http://"+serve.Admin+"/api/v1/services/llm%2Fnope/canary/pause", map[string]any{}, nil); resp.StatusCode != http.StatusNotFound {
				t.Errorf("pause of an unknown alias: status %d, want 404", resp.StatusCode)
			}
		})
	}
}

// ttftAnalysis judges llm/chat on ttft_p99: a 60 s window, min_requests
// 60, roll back above 0.6 s (straight to 0 above 1.2 s), never promote,
// a cooldown of a minute. The threshold is far above the fast canary's
// 20 ms, so that a busy machine's stall of a few hundred milliseconds in
// one of its dozen requests does not roll it back.
const ttftAnalysis = `{
        "enabled": true, "window_seconds": 60, "step": 10, "min_requests": 60, "cooldown_seconds": 60,
        "promote": {"metric": "error_rate", "threshold": 0},
        "rollback": {"metric": "ttft_p99", "threshold": 0.6}
      }`

// TestModelCanaryTTFT is the fleet test of a ttft_p99 judgement (issue
// 25), on dwara serve and a replica sharing one database, streamed chats
// sent to the replica: an alias at 90/10 whose canary model answers
// every request but sends its first token after 1.5 s, above twice the
// rollback threshold of 0.6 s, is rolled back straight to 0 on both
// proxies, the event showing the canary's TTFT p99; one whose canary
// answers its first token after 20 ms is judged on windows of
// min_requests and more, with that TTFT in the window, and held at 10.
// Neither canary fails a request, so a controller that ignored ttft_p99
// would roll back neither.
func TestModelCanaryTTFT(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ttft     time.Duration
		rollback bool
	}{
		{"first token after 1.5s", 1500 * time.Millisecond, true},
		{"first token after 20ms", 20 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startModelFleet(t, fakeai.Options{Name: "cand", TTFT: tc.ttft, Seed: 7, Events: 2}, ttftAnalysis)
			if tc.rollback {
				e := f.severeRollback(t, 400)
				if e.Canary == nil || e.Canary.TTFTP99 < 1.2 || e.Canary.Errors != 0 || e.Canary.Requests+e.Baseline.Requests < 60 {
					t.Errorf("event figures baseline %+v canary %+v, want min_requests met, no error and a canary TTFT p99 over 1.2 s", e.Baseline, e.Canary)
				}
				if !strings.Contains(e.Reason, "ttft_p99") {
					t.Errorf("event reason %q, want it to name ttft_p99", e.Reason)
				}
				return
			}
			f.heldWithoutEvent(t, 120, 400, 60, fmt.Sprintf("a canary with a TTFT of %v", tc.ttft))
			if !modelWeightIs(t, 10, f.serve, f.replica) {
				t.Error("the weight of llm/chat moved without an event")
			}
			var list apiv1.CanaryList
			if resp := call(t, http.MethodGet, "http://"+f.serve.Admin+"/api/v1/canary", nil, &list); resp.StatusCode != http.StatusOK || len(list.Items) != 1 {
				t.Fatalf("GET /api/v1/canary: status %d, %d groups; want 200 and one", resp.StatusCode, len(list.Items))
			}
			if w := list.Items[0].CanaryWindow; w.TTFTP99 < tc.ttft.Seconds() || w.TTFTP99 >= 0.6 {
				t.Errorf("canary window %+v, want a TTFT p99 of at least %v and under the threshold 0.6 s", w, tc.ttft)
			}
		})
	}
}
