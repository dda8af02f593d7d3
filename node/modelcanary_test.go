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

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/fakeai"
)

// modelGroup is the canary group of these tests: alias chat of service
// llm.
const modelGroup = "llm/chat"

// modelCanarySpec routes alias chat of service llm (base path /v1) 90/10
// between the fake upstreams base (model m-base) and cand (model m-cand)
// under canary analysis: a 60 s window, min_requests 200, roll back above
// an error rate of 5% (straight to 0 above 10%), never promote (below
// 0), a cooldown of a minute.
func modelCanarySpec(base, cand string) json.RawMessage {
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
      "canary_analysis": {
        "enabled": true, "window_seconds": 60, "step": 10, "min_requests": 200, "cooldown_seconds": 60,
        "promote": {"metric": "error_rate", "threshold": 0},
        "rollback": {"metric": "error_rate", "threshold": 0.05}
      }
    }]
  }]
}`, base, cand))
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
			url := dbtest.New(t)
			store := openTestStore(t, url)
			base := fakeAI(t, fakeai.Options{Name: "base", Seed: 3, Events: 2})
			cand := fakeAI(t, tc.cand)
			serve, replica := canaryProcs(t, "", url, nil)
			g := publish(t, serve.Admin, modelCanarySpec(base, cand))
			serve.waitApplied(t, g.ID)
			replica.waitApplied(t, g.ID)
			waitUntil(t, "both processes at weight 10 of llm/chat", func() bool {
				for _, p := range []*proc{serve, replica} {
					if scrape(t, metricsAddr(p), "dwara_canary_weight")["group="+modelGroup] != 10 {
						return false
					}
				}
				return true
			}, ticks(t, canaryInterval))

			next := ids(25)
			sendChats := func(max int, what string, done func() bool) {
				t.Helper()
				for i := 0; ; i++ {
					if i%20 == 0 && done() {
						return
					}
					if i >= max {
						t.Fatalf("%s: not after %d requests", what, i)
					}
					sendChat(t, replica.Proxy, next())
				}
			}
			if tc.rollback {
				sendChats(5000, "a rollback of llm/chat", func() bool { return len(modelEvents(t, store, g.ID)) > 0 })
				e := modelEvents(t, store, g.ID)[0]
				if e.Service != modelGroup || e.Action != apiv1.CanarySevereRollback || e.FromWeight != 10 || e.ToWeight != 0 {
					t.Fatalf("event %+v, want a severe_rollback of %s 10 -> 0", e, modelGroup)
				}
				if e.Canary == nil || e.Canary.ErrorRate < 0.1 || e.Canary.Requests+e.Baseline.Requests < 200 {
					t.Errorf("event figures baseline %+v canary %+v, want min_requests met and the canary over 10%%", e.Baseline, e.Canary)
				}
				waitUntil(t, "both processes at weight 0 of llm/chat", func() bool {
					for _, p := range []*proc{serve, replica} {
						if scrape(t, metricsAddr(p), "dwara_canary_weight")["group="+modelGroup] != 0 {
							return false
						}
					}
					return true
				}, ticks(t, canaryInterval))
				for _, p := range []*proc{serve, replica} {
					before := scrape(t, metricsAddr(p), "dwara_model_requests_total")
					for range 100 {
						sendChat(t, p.Proxy, next())
					}
					after := scrape(t, metricsAddr(p), "dwara_model_requests_total")
					for k, v := range after {
						if strings.Contains(k, "upstream=cand") && v != before[k] {
							t.Errorf("%s after the rollback: %s went %v -> %v, want no request to the canary", p.Proxy, k, before[k], v)
						}
					}
				}
				return
			}
			judged := func() bool {
				for _, p := range []*proc{serve, replica} {
					m := scrape(t, metricsAddr(p), "dwara_canary_window_requests")
					if m["group="+modelGroup+",version=baseline"]+m["group="+modelGroup+",version=canary"] >= 400 {
						return true
					}
				}
				return false
			}
			sendChats(5000, "a window of 400 requests judged", judged)
			for range 200 { // and judged again, several times
				sendChat(t, replica.Proxy, next())
			}
			waitUntil(t, "the runner judged the last requests", judged, ticks(t, canaryInterval))
			if es := modelEvents(t, store, g.ID); len(es) != 0 {
				t.Fatalf("a canary answering 429 at 30%%: events %+v, want none", es)
			}
			limited := 0.0
			for k, v := range scrape(t, metricsAddr(replica), "dwara_model_requests_total") {
				if strings.Contains(k, "upstream=cand") && strings.Contains(k, "code=429") {
					limited += v
				}
			}
			if limited < 10 {
				t.Errorf("the canary answered %v 429s, want the 30%% the test is about", limited)
			}
			if !weightIs429(t, serve, replica) {
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

// weightIs429 reports whether both processes still serve llm/chat at its
// configured weight 10.
func weightIs429(t *testing.T, procs ...*proc) bool {
	t.Helper()
	for _, p := range procs {
		if scrape(t, metricsAddr(p), "dwara_canary_weight")["group="+modelGroup] != 10 {
			return false
		}
	}
	return true
}
