package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
)

// scheduleHold is the hold of dashboardSchedule's steps: long enough for
// the page to show it counting down, under the 2 s refresh of a moving
// schedule and a busy machine.
const scheduleHold = 10

// TestDashboardSchedule drives the canary panel of a group on a schedule
// in headless Chromium (dashboardSchedule), in a browser of its own: a
// session of TestDashboard's shared browser is bounded as a whole.
func TestDashboardSchedule(t *testing.T) {
	t.Parallel()
	browser, shots := dashboardBrowser(t)
	dashboardSchedule(t, browser, shots)
}

// dashboardSchedule drives the canary panel of a group on a schedule in
// the browser: shop 90/10 under steps [10, 50, 100], a 10 s hold at each
// step, gate manual and an event webhook, with steady healthy traffic once
// the page is up. The page shows the schedule as a row of three steps with the first marked
// in force (90/10) and a gate before each step up; the hold counting down
// (at least two falling values, each within the hold); then the gate
// waiting with a Promote button. Pressed and confirmed, it promotes:
// GET /api/v1/canary then shows 50/50 at step 1, the promote recorded with
// the dashboard as actor, and the page marks the second step; the event
// hook's result (ok, HTTP 200) shows beside the promote it was called for.
// The panel fits the 1280 px window; nothing is loaded from elsewhere and
// no script fails.
func dashboardSchedule(t *testing.T, browser context.Context, shots string) {
	dbURL := dbtest.New(t)
	a, b := pools(t)
	hs := startHookServer(t)
	sc := ServeConfig{DatabaseURL: dbURL}
	sc.CanaryInterval = canaryInterval
	srv := startServe(t, sc)
	admin := "http://" + srv.Admin
	ca := analysis(0, 20, 1)
	ca.Steps, ca.HoldSeconds, ca.Gate = []int{10, 50, 100}, scheduleHold, config.GateManual
	ca.Webhooks = []config.Webhook{{Name: "chat", Type: config.WebhookEvent, URL: hs.url + "/events", TimeoutS: 5}}
	g := publish(t, srv.Admin, shopSpec(a, b, 90, 10, ca).JSON())
	srv.waitApplied(t, g.ID)
	shop := func() apiv1.CanaryGroup {
		t.Helper()
		var list apiv1.CanaryList
		call(t, http.MethodGet, admin+"/api/v1/canary", nil, &list)
		for _, cg := range list.Items {
			if cg.Service == "shop" {
				return cg
			}
		}
		t.Fatalf("no canary group shop in %+v", list.Items)
		return apiv1.CanaryGroup{}
	}

	origin := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, origin)
	const card = `[data-canary="shop"]`
	p.waitFor("shop's schedule of three steps", `document.querySelectorAll('`+card+` [data-schedule="shop"] li[data-step]').length === 3`)
	if got := eval[string](p, `[...document.querySelectorAll('`+card+` li[data-step]')].map(li => li.dataset.stepWeight + ':' + li.dataset.stepState + (li.querySelector('[data-gate-before]') ? ':gate' : '')).join(',')`); got != "10:current,50:ahead:gate,100:ahead:gate" {
		t.Errorf("the steps read %q, want 10:current,50:ahead:gate,100:ahead:gate (the first in force, a gate before each step up)", got)
	}
	if got := eval[string](p, `document.querySelector('`+card+` li[aria-current="step"] [data-step-in-force]').textContent`); !strings.Contains(got, "90/10") {
		t.Errorf("the step in force says %q, want the weights in force 90/10", got)
	}

	// Traffic from now on, so the hold starts with the page up; it counts
	// down: the page shows at least two falling values of seconds left,
	// each within the hold.
	steady(t, srv.Proxy, "/shop/", 20000)
	p.waitFor("the hold counting down", `(() => {
		const el = document.querySelector('`+card+` [data-hold-left]');
		const seen = (window.holdSeen ||= []);
		if (el && seen[seen.length - 1] !== Number(el.dataset.holdLeft)) {
			seen.push(Number(el.dataset.holdLeft));
		}
		return seen.length >= 2 && seen[seen.length - 1] < seen[0];
	})()`)
	countdown := eval[[]float64](p, `window.holdSeen`)
	for i, v := range countdown {
		if v < 1 || v > scheduleHold || (i > 0 && v >= countdown[i-1]) {
			t.Errorf("the hold's countdown showed %v, want falling seconds within 1..%d", countdown, scheduleHold)
			break
		}
	}
	if got := shop(); got.HoldLeftSeconds == nil && !got.GateWaiting {
		t.Errorf("the page counted a hold down, but the API shows none running and no gate waiting: %+v", got)
	}
	eval[any](p, `document.querySelector('`+card+` [data-schedule]').scrollIntoView({block: 'center'})`)
	p.screenshot("schedule-hold", false)

	// The gate waits; its button promotes, after a confirmation.
	p.waitFor("the gate waiting, with its button", `document.querySelector('`+card+` [data-gate-waiting] [data-action="promote"]')`)
	if got := shop(); !got.GateWaiting || got.Weights != [2]int{90, 10} || got.NextWeight != 50 || !got.NextGated {
		t.Fatalf("with the gate shown waiting, the API says %+v; want the gate waiting at 90/10 before 50", got)
	}
	eval[any](p, `document.querySelector('`+card+` [data-schedule]').scrollIntoView({block: 'center'})`)
	p.screenshot("schedule-gate", false)
	p.click(card + ` [data-action="promote"]`)
	p.waitFor("the promote's confirmation", `document.querySelector('dialog[open] [data-move]')`)
	if move := eval[string](p, `document.querySelector('dialog[open] [data-move]').textContent.trim()`); move != "shop: 90/10 → 50/50" {
		t.Errorf("the promote's confirmation says %q, want %q", move, "shop: 90/10 → 50/50")
	}
	p.click(`dialog[open] [data-confirm]`)
	waitUntil(t, "the API showing shop at 50/50, step 1", func() bool {
		got := shop()
		return got.Weights == [2]int{50, 50} && got.Schedule != nil && got.Schedule.Step == 1
	}, ticks(t, 100*time.Millisecond))
	var events apiv1.CanaryEventList
	call(t, http.MethodGet, admin+"/api/v1/canary/events?service=shop&limit=50", nil, &events)
	var promote *apiv1.CanaryEvent
	for i, e := range events.Items {
		if e.Action == apiv1.CanaryPromote {
			promote = &events.Items[i]
			break
		}
	}
	if promote == nil || promote.FromWeight != 10 || promote.ToWeight != 50 || promote.Actor != "dashboard" {
		t.Fatalf("the newest promote %+v, want 10 -> 50 by the dashboard; events %+v", promote, events.Items)
	}
	p.waitFor("the second step marked in force", `(document.querySelector('`+card+` li[aria-current="step"]') || {dataset: {}}).dataset.stepWeight === '50'`)
	p.waitFor("the dialog closed", `!document.querySelector('dialog[open]')`)

	// The event hook's result beside the promote it was called for.
	p.waitFor("the event hook's result beside the promote", fmt.Sprintf(
		`document.querySelector('%s tr[data-event="%d"] [data-webhook="chat"][data-webhook-ok="true"][data-webhook-status="200"]')`, card, promote.ID))
	if got := eval[string](p, fmt.Sprintf(`document.querySelector('%s tr[data-event="%d"] [data-webhook="chat"]').textContent.replace(/\s+/g, ' ').trim()`, card, promote.ID)); !strings.Contains(got, "chat event: HTTP 200") {
		t.Errorf("the hook's result reads %q, want its name, type and status", got)
	}
	if !eval[bool](p, `(() => {
		const c = document.querySelector('`+card+`');
		const w = c.querySelector('table.events').closest('.table-wrap');
		return c.querySelector('[data-schedule]').getBoundingClientRect().right <= c.getBoundingClientRect().right &&
			w.scrollWidth <= w.clientWidth && document.documentElement.scrollWidth <= window.innerWidth;
	})()`) {
		t.Errorf("the canary panel with its schedule does not fit a %d px window", viewW)
	}
	eval[any](p, `document.querySelector('`+card+` [data-schedule]').scrollIntoView({block: 'center'})`)
	p.screenshot("schedule-promoted", false)
	eval[any](p, `document.querySelector('`+card+` table.events').scrollIntoView({block: 'center'})`)
	p.screenshot("schedule-webhooks", false)
	seen.Check(t, strings.TrimPrefix(origin, "http://"), append(dashboardAssets, "/api/v1/canary", "/api/v1/services/shop/canary/promote")...)
}

// steady sends up to max GETs of path through the proxy at addr, one
// every 10 ms, from now until the test ends: the healthy traffic a
// schedule needs to be judged on, light enough to leave the machine to
// the tests that run beside it. Answers and errors do not matter.
func steady(t *testing.T, addr, path string, max int) {
	ctx, cancel := context.WithTimeout(context.Background(), dashboardSession)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		next := ids(23)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for range max {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
			req.Header.Set("X-Request-Id", next())
			if resp, err := httpc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}
