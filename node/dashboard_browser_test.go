package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/web"
	"github.com/dwara/dwara/web/webtest"
)

var (
	dashboardShots = flag.String("dashboard.screenshots", "",
		"directory that keeps the screenshots of TestDashboard (default: a temporary directory removed after the test)")
	dashboardREADME = flag.Bool("dashboard.readme", false,
		"write TestDashboard's screenshot of the whole console to ../web/dashboard.png, the README's picture")
)

const (
	// dashboardSession bounds one browser session of TestDashboard: every
	// wait in the page and every browser call is within it.
	dashboardSession = 3 * time.Minute
	// uiWait bounds each wait for the page to show something.
	uiWait = wait
	// viewW and viewH are the laptop viewport of the test, and the size of
	// the README's screenshot.
	viewW, viewH = 1280, 800
)

// TestDashboard drives the operator's console in headless Chromium against
// a real dwara serve and PostgreSQL: it shows the services of a spec with
// a sticky 90/10 split and a canary group; Flip (confirmed) and Roll back
// change the bar and add generations; a generation published through the
// API meanwhile appears without a reload; the weights editor shows the
// share of sessions a change moves before saving it; a canary rolled back
// by the controller shows up live; the page fits a phone; and nothing is
// requested from another host, with no script error. With a token, the
// page asks for it and then works, event stream included.
func TestDashboard(t *testing.T) {
	t.Parallel()
	browser, shots := dashboardBrowser(t)
	t.Run("operator", func(t *testing.T) { dashboardOperator(t, browser, shots) })
	t.Run("token", func(t *testing.T) { dashboardToken(t, browser, shots) })
	t.Run("branches", func(t *testing.T) { dashboardBranches(t, browser, shots) })
}

// dashboardBrowser skips t when Chromium is missing, else starts a
// headless browser of its own at the test's viewport (stopped when t
// ends) and returns it with the directory for t's screenshots.
func dashboardBrowser(t *testing.T) (browser context.Context, shots string) {
	t.Helper()
	webtest.RequireChromium(t)
	return webtest.StartBrowser(t, viewW, viewH), webtest.ScreenshotDir(t, *dashboardShots)
}

// dashboardSpec has service web on "/" split 90/10 between pools a and b
// with a sticky cookie, and service shop on /shop, the same pools 90/10
// under canary analysis that acts after 20 requests.
func dashboardSpec(a, b *demo.Pool) json.RawMessage {
	return spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).Sticky("dwara_affinity", 3600).
		Split("shop", "/shop", spectest.T(a.Name, 90), spectest.T(b.Name, 10)).
		Analysis(config.CanaryAnalysis{
			Enabled: true, WindowSeconds: 30, Step: 10, MinRequests: 20, CooldownSeconds: 0,
			Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
			Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
		}).JSON()
}

// dashboardOrigin returns the URL of the admin listener at admin, after
// checking that it serves the dashboard at "/".
func dashboardOrigin(t *testing.T, admin string) string {
	t.Helper()
	resp, err := httpc.Get("http://" + admin + "/")
	if err != nil {
		t.Fatalf("GET / on the admin listener: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`src="/ui/app.js"`)) {
		t.Fatalf("GET / on the admin listener: status %d, %.300s; want the dashboard (web.Dashboard)", resp.StatusCode, body)
	}
	return "http://" + admin
}

// utcTime is how the dashboard writes a time.
var utcTime = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`)

// page is one tab of the dashboard under test.
type page struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

// waitFor polls the JavaScript expression cond in the page until it is
// truthy; what says what is awaited.
func (p *page) waitFor(what, cond string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[any](cond, chromedp.WithPollingTimeout(uiWait))); err != nil {
		p.fail(fmt.Sprintf("the page did not show %s within %v: %v", what, uiWait, err))
	}
}

// fail fails the test with a screenshot and the page's text.
func (p *page) fail(msg string) {
	p.t.Helper()
	shot := webtest.Screenshot(p.ctx, p.t, p.shots, strings.ReplaceAll(p.t.Name(), "/", "-")+"-failed", true)
	text, _ := chromedp.Run(p.ctx, chromedp.Evaluate[string](`document.body.innerText`))
	p.t.Fatalf("%s\nscreenshot (kept with -dashboard.screenshots=DIR): %s\npage text: %.3000s", msg, shot, text)
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](p *page, expr string) T {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.fail(fmt.Sprintf("evaluate %s: %v", expr, err))
	}
	return v
}

// click clicks the element matching the CSS selector sel.
func (p *page) click(sel string) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		p.fail(fmt.Sprintf("click %s: %v", sel, err))
	}
}

// retype replaces the value of the input sel by typing v, as a person
// would: focus, select all, type.
func (p *page) retype(sel, v string) {
	p.t.Helper()
	err := chromedp.Do(p.ctx,
		chromedp.Focus(chromedp.CSS(sel), chromedp.NodeVisible),
		chromedp.KeyEvent("a", chromedp.KeyModifiers(chromedp.ModifierCtrl)),
		chromedp.KeyEvent(v))
	if err != nil {
		p.fail(fmt.Sprintf("type %q into %s: %v", v, sel, err))
	}
}

func (p *page) screenshot(name string, full bool) string {
	p.t.Helper()
	path := webtest.Screenshot(p.ctx, p.t, p.shots, name, full)
	p.t.Logf("screenshot: %s", path)
	return path
}

// bar is a JavaScript expression: the weights of service's bar of kind
// ("configured" or "in-force"), as "upstream=weight,...".
func bar(service, kind string) string {
	return fmt.Sprintf(`Array.from(document.querySelectorAll('[data-service=%q] .bar[data-kind=%q] [data-weight]')).map(s => s.dataset.upstream + '=' + s.dataset.weight).join(',')`, service, kind)
}

// topGeneration is a JavaScript expression: "id action" of the newest
// generation of the history.
const topGeneration = `(() => { const g = document.querySelector('#history [data-generation]'); return g ? g.dataset.generation + ' ' + g.dataset.action : ''; })()`

// openTab opens a tab of browser on origin+"/" and checks the security
// headers of the page.
func openTab(t *testing.T, browser context.Context, shots, origin string) (*page, *webtest.PageEvents) {
	t.Helper()
	ctx, cancel := context.WithTimeout(browser, dashboardSession)
	t.Cleanup(cancel)
	ctx, cancel = chromedp.NewContext(ctx) // a tab of its own
	t.Cleanup(cancel)
	seen := &webtest.PageEvents{}
	seen.Listen(t, ctx)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(viewW, viewH)); err != nil {
		t.Fatalf("set the viewport: %v", err)
	}
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(origin+"/"))
	if err != nil {
		t.Fatalf("load the dashboard: %v", err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("GET /: status %d", resp.Status)
	}
	headers := map[string]string{}
	for k, v := range resp.Headers {
		headers[strings.ToLower(k)] = fmt.Sprint(v)
	}
	for k, want := range map[string]string{
		"content-security-policy": web.DashboardCSP,
		"x-content-type-options":  "nosniff",
		"referrer-policy":         "no-referrer",
		"x-frame-options":         "DENY",
	} {
		if headers[k] != want {
			t.Errorf("GET /: %s %q, want %q", k, headers[k], want)
		}
	}
	return &page{t: t, ctx: ctx, shots: shots}, seen
}

// dashboardAssets are the files every load of the page requests.
var dashboardAssets = []string{"/", "/ui/app.js", "/ui/api.js", "/ui/chart.js", "/ui/app.css",
	"/ui/vendor/htm-preact-standalone.module.js", "/api/v1/events", "/api/v1/generations/current"}

func dashboardOperator(t *testing.T, browser context.Context, shots string) {
	dbURL := dbtest.New(t)
	a, b := pools(t)
	sc := ServeConfig{DatabaseURL: dbURL, Demo: false}
	sc.CanaryInterval = canaryInterval
	srv := startServe(t, sc)
	admin := "http://" + srv.Admin
	g1 := publish(t, srv.Admin, dashboardSpec(a, b))
	srv.waitApplied(t, g1.ID)
	origin := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, origin)

	// The services of the active generation, their splits, stickiness and
	// endpoints, the canary group, the history, the gateway.
	p.waitFor("the two services", `document.querySelectorAll('[data-service]').length === 2`)
	p.waitFor("web's 90/10 bar", bar("web", "configured")+` === 'pool-a=90,pool-b=10'`)
	p.waitFor("web's sticky cookie", `document.querySelector('[data-service="web"] [data-sticky]').textContent.includes('dwara_affinity')`)
	p.waitFor("every endpoint of web up", `document.querySelectorAll('[data-service="web"] [data-health="up"]').length === 4`)
	p.waitFor("shop's canary group, running", `document.querySelector('[data-canary="shop"] [data-state="running"]')`)
	p.waitFor("generation 1 in the history", topGeneration+` === '1 create'`)
	p.waitFor("the gateway that applied generation 1", `document.querySelector('#gateways [data-applied="1"]')`)
	// An instance not heard of for a minute, which last saw every endpoint
	// of web down: listed as stale, and counted nowhere.
	stale, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	var downs []apiv1.EndpointState
	for _, ep := range a.Addrs {
		downs = append(downs, apiv1.EndpointState{Upstream: a.Name, Endpoint: ep, Up: false})
	}
	if err := stale.UpsertGateway(context.Background(), apiv1.GatewayInstance{ID: "gw-gone", Hostname: "gone", Listen: ":8080",
		AppliedGeneration: g1.ID, LastHeartbeat: time.Now().Add(-time.Minute), Endpoints: downs}); err != nil {
		t.Fatal(err)
	}
	p.waitFor("the stale instance, marked so", `(document.querySelector('#gateways [data-gateway="gw-gone"] .badge') || {}).textContent === 'stale'`)
	p.waitFor("every endpoint of web still up", `document.querySelectorAll('[data-service="web"] [data-health="up"]').length === 4`)
	p.waitFor("the live event stream", `document.querySelector('.live-live')`)
	p.waitFor("the audit entry of the publish", `document.querySelectorAll('#audit [data-audit]').length === 1`)
	// A mark that a reload would lose.
	eval[any](p, `window.dwaraTestMark = 'not reloaded'`)
	p.screenshot("loaded", true)
	// web's 10% slice is too narrow for its label: it is labelled under
	// the bar.
	if got := eval[string](p, `(document.querySelector('[data-service="web"] [data-slice-label="pool-b"]') || {}).textContent || ''`); strings.TrimSpace(got) != "pool-b 10.0%" {
		t.Errorf("the label of web's small slice: %q, want \"pool-b 10.0%%\"; the bars: %s", got,
			eval[string](p, `[...document.querySelectorAll('[data-service="web"] .split')].map(e => e.outerHTML).join('\n')`))
	}

	// Flip, confirmed: the confirmation names the move and its share.
	p.click(`[data-service="web"] [data-action="flip"]`)
	p.waitFor("the flip's confirmation", `document.querySelector('dialog[open] [data-move]')`)
	if move := eval[string](p, `document.querySelector('dialog[open] [data-move]').textContent.trim()`); move != "web: 90/10 → 10/90" {
		t.Errorf("the flip's confirmation says %q, want %q", move, "web: 90/10 → 10/90")
	}
	p.waitFor("the flip's moved share (80%)", `document.querySelector('dialog[open] [data-moved-share="0.8"]')`)
	p.screenshot("flip-confirmation", false)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("web flipped to 10/90", bar("web", "configured")+` === 'pool-a=10,pool-b=90'`)
	p.waitFor("generation 2 (flip) in the history", topGeneration+` === '2 flip'`)
	p.waitFor("the dialog closed", `!document.querySelector('dialog[open]')`)
	var cur apiv1.Generation
	call(t, http.MethodGet, admin+"/api/v1/generations/current", nil, &cur)
	if cur.ID != 2 || cur.Action != apiv1.ActionFlip || cur.Author != "dashboard" {
		t.Errorf("after the flip the active generation is %d (%s by %s), want 2 (flip by dashboard)", cur.ID, cur.Action, cur.Author)
	}

	// Roll back to generation 1: the earlier weights come back.
	p.click(`#history [data-generation="1"] [data-action="rollback"]`)
	p.waitFor("the rollback's confirmation with its diff", `document.querySelector('dialog[open] [data-diff-service="web"]')`)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("web back at 90/10", bar("web", "configured")+` === 'pool-a=90,pool-b=10'`)
	p.waitFor("generation 3 (rollback) in the history", topGeneration+` === '3 rollback'`)
	call(t, http.MethodGet, admin+"/api/v1/generations/current", nil, &cur)
	if cur.ID != 3 || cur.SourceID == nil || *cur.SourceID != 1 {
		t.Errorf("after the rollback the active generation is %d from %v, want 3 from 1", cur.ID, cur.SourceID)
	}
	// The diff of the flip against its parent.
	p.click(`#history [data-generation="2"] [data-action="diff"]`)
	p.waitFor("the flip's diff", `(document.querySelector('#history [data-generation="2"] [data-diff-service="web"]') || {}).textContent?.includes('weights pool-a 90->10')`)
	p.click(`#history [data-generation="2"] [data-action="diff"]`)
	p.waitFor("the diff hidden", `!document.querySelector('#history [data-generation="2"] .diff')`)

	// A generation published through the API meanwhile shows up without a
	// reload, through the one event stream.
	var g4 apiv1.Generation
	if resp := call(t, http.MethodPut, admin+"/api/v1/services/shop/weights",
		map[string]any{"weights": map[string]int{"pool-a": 80, "pool-b": 20}, "message": "from the API"}, &g4); resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT shop weights: status %d", resp.StatusCode)
	}
	p.waitFor("generation 4 in the history", topGeneration+` === '4 weights'`)
	p.waitFor("shop's 80/20 bar", bar("shop", "configured")+` === 'pool-a=80,pool-b=20'`)
	if mark := eval[string](p, `window.dwaraTestMark || 'reloaded'`); mark != "not reloaded" {
		t.Errorf("the page was reloaded (%s)", mark)
	}
	if n := seen.Count("/api/v1/events"); n != 1 {
		t.Errorf("the page opened the event stream %d times, want once", n)
	}

	// The weights editor keeps the total and shows the moved share before
	// saving: 90/10 -> 70/30 moves 20% of web's sessions.
	p.click(`[data-service="web"] [data-action="edit-weights"]`)
	p.retype(`[data-editor="web"] [data-weight-input="pool-b"]`, "30")
	p.waitFor("the kept total (pool-a at 70)", `document.querySelector('[data-editor="web"] [data-weight-input="pool-a"]').value === '70'`)
	p.waitFor("the moved share (20%)", `document.querySelector('[data-editor="web"] [data-moved-share="0.2"]')`)
	if got := eval[string](p, `document.querySelector('[data-editor="web"] [data-moved-share]').textContent`); got != "20.0%" {
		t.Errorf("the editor shows a moved share of %q, want 20.0%%", got)
	}
	if top := eval[string](p, topGeneration); top != "4 weights" {
		t.Errorf("the preview published something: the newest generation is %q", top)
	}
	p.screenshot("weights-editor", false)
	p.click(`[data-editor="web"] [data-action="save-weights"]`)
	p.waitFor("web at 70/30", bar("web", "configured")+` === 'pool-a=70,pool-b=30'`)
	p.waitFor("generation 5 (weights) in the history", topGeneration+` === '5 weights'`)

	// The canary controller rolls shop's canary back; the console shows it
	// without a reload: the group's state, the event, the weights in force.
	b.SetFailRate(1)
	next := func() string { return rand.Text() }
	deadline := time.Now().Add(wait)
	for i := 0; ; i++ {
		if i%20 == 0 && eval[bool](p, `!!document.querySelector('[data-canary="shop"] tr[data-event-action="severe_rollback"]')`) {
			break
		}
		if i >= 5000 || time.Now().After(deadline) {
			p.fail(fmt.Sprintf("no rollback of shop's canary shown after %d requests", i))
		}
		sendPath(t, srv.Proxy, "/shop/", next())
	}
	p.waitFor("shop rolled back", `document.querySelector('[data-canary="shop"] [data-state="rolled_back"]')`)
	p.waitFor("shop's weights in force, 100/0", bar("shop", "in-force")+` === 'pool-a=100,pool-b=0'`)
	// The target table says the weight in force and the share served, not
	// only the configured 10.
	p.waitFor("shop's target table with pool-b at 0 in force", `(() => {
		const r = document.querySelector('[data-service="shop"] tr[data-target="pool-b"]');
		const w = r && r.querySelector('[data-in-force-weight]');
		return w && w.textContent === '0' && r.querySelector('[data-share]').textContent === '0%';
	})()`)
	// Times in UTC, the zone named, as the CLI prints them.
	if got := eval[string](p, `document.querySelector('[data-canary="shop"] table.events time').textContent`); !utcTime.MatchString(got) {
		t.Errorf("an event's time reads %q, want YYYY-MM-DD hh:mm:ss UTC", got)
	}
	// The events table fits the 1280 px window: nothing of it scrolls out.
	if !eval[bool](p, `(() => {
		const t = document.querySelector('[data-canary="shop"] table.events');
		const w = t.closest('.table-wrap');
		return t.getBoundingClientRect().right <= window.innerWidth && w.scrollWidth <= w.clientWidth;
	})()`) {
		t.Errorf("the canary events table does not fit a %d px window", viewW)
	}
	p.waitFor("the rollback marked on the timeline", `document.querySelector('[data-canary="shop"] svg [data-event-action="severe_rollback"]')`)
	p.waitFor("adopt enabled", `!document.querySelector('[data-canary="shop"] [data-action="adopt"]').disabled`)
	eval[any](p, `document.getElementById('canary').scrollIntoView()`)
	p.screenshot("canary", false)
	eval[any](p, `window.scrollTo(0, 0)`)
	readme := p.screenshot("console", false)
	p.screenshot("console-full", true)
	if *dashboardREADME && readme != "" {
		data, err := os.ReadFile(readme)
		if err == nil {
			err = os.WriteFile(filepath.Join("..", "web", "dashboard.png"), data, 0o644)
		}
		if err != nil {
			t.Errorf("write web/dashboard.png: %v", err)
		}
	}

	// Pause and resume the group; adopt the weights the controller set.
	p.click(`[data-canary="shop"] [data-action="pause"]`)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("shop paused", `document.querySelector('[data-canary="shop"] [data-state="paused"]')`)
	p.click(`[data-canary="shop"] [data-action="resume"]`)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("shop resumed", `document.querySelector('[data-canary="shop"] [data-state="rolled_back"]')`)
	p.click(`[data-canary="shop"] [data-action="adopt"]`)
	p.waitFor("the adoption's confirmation with its moved share (20%)", `document.querySelector('dialog[open] [data-moved-share="0.2"]')`)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("generation 6 (adopt) in the history", topGeneration+` === '6 adopt'`)
	p.waitFor("shop configured at 100/0", bar("shop", "configured")+` === 'pool-a=100,pool-b=0'`)

	// A phone: nothing wider than the screen (tables scroll in their box).
	if err := chromedp.Do(p.ctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile)); err != nil {
		t.Fatalf("emulate a phone: %v", err)
	}
	p.waitFor("the page within a phone's width", `document.documentElement.scrollWidth <= 390`)
	p.screenshot("phone", true)

	seen.Check(t, strings.TrimPrefix(origin, "http://"), dashboardAssets...)
}

// dashboardBranches: a service with a forced-branch header, stable
// allocation and a mirror shows the three on its card, and the exposures
// of the active generation once sticky sessions were minted.
func dashboardBranches(t *testing.T, browser context.Context, shots string) {
	dbURL := dbtest.New(t)
	a, b := pools(t)
	shadow, err := demo.StartPool("pool-shadow", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(shadow.Close)
	spec := spectest.SplitOver([]*demo.Pool{a, b}, 50, 50).Sticky("dwara_affinity", 3600).
		Upstream(shadow.Name, shadow.Addrs...).
		Edit(func(s *config.Spec) {
			web := &s.Services[0]
			web.Split.Allocation = config.AllocationStable
			web.Override = &config.Override{Header: "X-Dwara-Branch"}
			web.Mirror = &config.Mirror{Upstream: shadow.Name, Percent: 10, MaxBodyBytes: 65536}
		}).JSON()
	srv := startServe(t, ServeConfig{DatabaseURL: dbURL})
	g := publish(t, srv.Admin, spec)
	srv.waitApplied(t, g.ID)
	origin := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, origin)

	card := `document.querySelector('[data-service="web"]').textContent`
	p.waitFor("web's card", `document.querySelector('[data-service="web"]')`)
	for _, want := range []string{"forced by header X-Dwara-Branch", "dwara probe web",
		"stable allocation (10,000 slots)", "mirrors 10% to pool-shadow, bodies up to 64 KiB"} {
		p.waitFor(fmt.Sprintf("%q on web's card", want), fmt.Sprintf(`%s.includes(%q)`, card, want))
	}
	// Sticky requests without a cookie each mint a session: an exposure.
	const sessions = 5
	for range sessions {
		sendPath(t, srv.Proxy, "/", rand.Text())
	}
	p.waitFor(fmt.Sprintf("%d exposures of generation %d", sessions, g.ID),
		fmt.Sprintf(`Number((document.querySelector('[data-service="web"] [data-exposures]') || {dataset: {}}).dataset.exposures) >= %d`, sessions))
	p.screenshot("branches", false)
	seen.Check(t, strings.TrimPrefix(origin, "http://"), append(dashboardAssets, "/api/v1/exposures/summary")...)
}

// sendPath sends one GET path with request id id through the proxy at
// addr; the answer does not matter.
func sendPath(t *testing.T, addr, path, id string) {
	t.Helper()
	sendAt(t, addr, path, id)
}

// authed sends an API request with the bearer token and returns the status.
func authed(t *testing.T, method, url, token string, body any) int {
	t.Helper()
	js, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, url, bytes.NewReader(js))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// dashboardToken: with an admin token the API answers 401, the page asks
// for the token, keeps it in sessionStorage and sends it, on its calls and
// on the event stream.
func dashboardToken(t *testing.T, browser context.Context, shots string) {
	const token = "dashboard-test-token"
	dbURL := dbtest.New(t)
	a, b := pools(t)
	srv := startServe(t, ServeConfig{DatabaseURL: dbURL, AdminToken: token})
	admin := "http://" + srv.Admin
	if status := authed(t, http.MethodPost, admin+"/api/v1/generations", token,
		map[string]any{"spec": specJSON(a, b, 90, 10)}); status != http.StatusCreated {
		t.Fatalf("publish: status %d", status)
	}
	origin := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, origin)

	p.waitFor("the token prompt", `document.querySelector('dialog[open][data-dialog="token"]')`)
	p.screenshot("token-prompt", false)
	if err := chromedp.Do(p.ctx, chromedp.SendKeys(chromedp.CSS(`dialog[open] [data-token-input]`), token, chromedp.NodeVisible)); err != nil {
		p.fail(fmt.Sprintf("type the token: %v", err))
	}
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("web's bar", bar("web", "configured")+` === 'pool-a=90,pool-b=10'`)
	p.waitFor("the live event stream", `document.querySelector('.live-live')`)
	if got := eval[string](p, `sessionStorage.getItem('dwara.token')`); got != token {
		t.Errorf("sessionStorage holds %q, want the token", got)
	}

	// The event stream carries the token too: a flip through the API shows.
	if status := authed(t, http.MethodPost, admin+"/api/v1/services/web/flip", token, map[string]any{}); status != http.StatusCreated {
		t.Fatalf("flip: status %d", status)
	}
	p.waitFor("generation 2 in the history", topGeneration+` === '2 flip'`)
	p.waitFor("web flipped to 10/90", bar("web", "configured")+` === 'pool-a=10,pool-b=90'`)

	// Kill, confirmed, with a message: the calls carry the token too.
	p.click(`[data-service="web"] [data-action="kill"]`)
	p.waitFor("the kill's confirmation", `(document.querySelector('dialog[open] [data-move]') || {}).textContent === 'web: 10/90 → 100/0'`)
	if err := chromedp.Do(p.ctx, chromedp.SendKeys(chromedp.CSS(`dialog[open] input[type="text"]`), "canary errors", chromedp.NodeVisible)); err != nil {
		p.fail(fmt.Sprintf("type the message: %v", err))
	}
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("web killed to 100/0", bar("web", "configured")+` === 'pool-a=100,pool-b=0'`)
	p.waitFor("generation 3 (kill) in the history", topGeneration+` === '3 kill'`)
	p.waitFor("the kill's message", `document.querySelector('#history [data-generation="3"] .msg').textContent === 'canary errors'`)

	// A refused change shows the API's problem with its field errors: the
	// preview of a total of 0, then the save.
	p.click(`[data-service="web"] [data-action="edit-weights"]`)
	p.click(`[data-editor="web"] input[type="checkbox"]`)
	p.retype(`[data-editor="web"] [data-weight-input="pool-a"]`, "0")
	p.waitFor("the preview's problem with its field errors", `document.querySelector('[data-editor="web"] .preview .problem .field-errors li')`)
	p.click(`[data-editor="web"] [data-action="save-weights"]`)
	p.waitFor("the save's problem", `document.querySelector('[data-editor="web"] > .problem .field-errors li')`)
	p.screenshot("refused", false)
	if top := eval[string](p, topGeneration); top != "3 kill" {
		t.Errorf("a refused change published something: the newest generation is %q", top)
	}

	// Until the token was given, the API answered 401; the refused change
	// 422 (its preview, then its save); nothing else failed.
	seen.CheckAllowing(t, strings.TrimPrefix(origin, "http://"), func(u *url.URL, status int) bool {
		switch status {
		case http.StatusUnauthorized:
			return strings.HasPrefix(u.Path, "/api/v1/")
		case http.StatusUnprocessableEntity:
			return u.Path == "/api/v1/generations" || u.Path == "/api/v1/services/web/weights"
		}
		return false
	}, dashboardAssets...)
}
