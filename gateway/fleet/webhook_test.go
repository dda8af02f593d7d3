package fleet

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testrun"
)

// TestRolloutHookRollsBack runs a canary whose rollout hook always answers
// 500: after config.MaxRolloutFailures failed checks in a row (each
// recorded, each of 2 attempts), the runner rolls the canary back by step
// (10 -> 0, rule webhook.rollout); the post_rollout hook is then called
// once, with that rollback as its event.
func TestRolloutHookRollsBack(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	post := make(chan apiv1.CanaryWebhookCall, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/post" {
			var c apiv1.CanaryWebhookCall
			_ = json.NewDecoder(r.Body).Decode(&c)
			post <- c
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	a := analysis
	a.Webhooks = []config.Webhook{
		{Name: "checks", Type: config.WebhookRollout, URL: srv.URL + "/check", TimeoutS: 1},
		{Name: "done", Type: config.WebhookPostRollout, URL: srv.URL + "/post"},
	}
	gen := publish(t, store, canarySpec().Edit(func(s *config.Spec) { s.Services[0].Split.CanaryAnalysis = &a }))
	acted := make(chan apiv1.CanaryEvent, 10)
	r := &Runner{Store: store, Instance: "i-1", Interval: 20 * time.Millisecond, LockRetry: 20 * time.Millisecond,
		Acted: func(e apiv1.CanaryEvent) { acted <- e }}
	stop := testrun.Background(t, r.Run)
	e := testrun.Recv(t, acted, "the rollback")
	if e.Action != apiv1.CanaryRollback || e.FromWeight != 10 || e.ToWeight != 0 || e.Rule != "webhook.rollout" {
		t.Fatalf("acted %+v, want a rollback 10 -> 0 by webhook.rollout", e)
	}
	if c := testrun.Recv(t, post, "the post_rollout call"); c.Event == nil || c.Event.ID != e.ID || c.Type != config.WebhookPostRollout {
		t.Errorf("post_rollout call %+v, want one with the rollback", c)
	}
	stop()
	if len(post) != 0 {
		t.Errorf("post_rollout called again: %+v", <-post)
	}
	events, err := store.ListCanaryEvents(context.Background(), "api", gen, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	fails := 0
	for _, ev := range events {
		if ev.Action == apiv1.CanaryWebhook && ev.Webhook.Name == "checks" {
			if ev.Webhook.OK || ev.Webhook.Status != 500 || ev.Webhook.Attempts != 2 || ev.ID > e.ID {
				t.Errorf("rollout check result %+v", ev.Webhook)
			}
			fails++
		}
	}
	if fails < config.MaxRolloutFailures {
		t.Errorf("%d failed checks recorded before the rollback, want %d", fails, config.MaxRolloutFailures)
	}
}
