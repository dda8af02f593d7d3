package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// analysis is the canary analysis of the tests: a 60 s window, error-rate
// thresholds.
func analysis(enabled bool) config.CanaryAnalysis {
	return config.CanaryAnalysis{
		Enabled:       enabled,
		WindowSeconds: 60,
		Step:          5,
		MinRequests:   10,
		Promote:       config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback:      config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
	}
}

// canarySpec is specWith(stable, canary) with canary analysis on service
// "api": one canary group, with "web" (one upstream) and "tri" (three
// targets) beside it.
func canarySpec(stable, canary int) *spectest.Builder {
	return specWith(stable, canary).Edit(func(s *config.Spec) {
		svc, _ := s.Service("api")
		ca := analysis(true)
		svc.Split.CanaryAnalysis = &ca
	})
}

// controller records canary actions as the runner does: under the runner
// lock, with Record's compare-and-set.
type controller struct {
	t    *testing.T
	lock *db.CanaryLock
}

// newController takes the runner lock of e's database until the test ends.
func (e *env) newController() *controller {
	e.t.Helper()
	l, err := e.store.TryCanaryLock(context.Background())
	if err != nil || l == nil {
		e.t.Fatalf("TryCanaryLock = %v, %v", l, err)
	}
	e.t.Cleanup(func() { l.Close(context.Background()) })
	return &controller{t: e.t, lock: l}
}

// act records a controller action of service in generation from one canary
// weight to another (configured is the generation's canary weight) and
// returns the stored event; it fails the test unless it was recorded.
func (c *controller) act(generation int64, service, action string, from, to, configured int) apiv1.CanaryEvent {
	c.t.Helper()
	e := apiv1.CanaryEvent{GenerationID: generation, Service: service, FromWeight: from, ToWeight: to, Action: action,
		Reason: fmt.Sprintf("%s %d->%d", action, from, to), InstanceID: "gw-1",
		Baseline: &apiv1.CanaryFigures{Requests: 100}, Canary: &apiv1.CanaryFigures{Requests: 10}, PValue: new(1.0)}
	stored, ok, err := c.lock.Record(context.Background(), e, configured)
	if err != nil || !ok {
		c.t.Fatalf("Record(%+v) = %v, %v; want recorded", e, ok, err)
	}
	return stored
}

// canaryList reads GET /api/v1/canary.
func (e *env) canaryList() apiv1.CanaryList {
	e.t.Helper()
	var list apiv1.CanaryList
	e.do(call{method: "GET", path: "/api/v1/canary"}).want(e.t, http.StatusOK).decode(e.t, &list)
	return list
}

// group returns the group of service in list, failing the test when there
// is none.
func group(t *testing.T, list apiv1.CanaryList, service string) apiv1.CanaryGroup {
	t.Helper()
	for _, g := range list.Items {
		if g.Service == service {
			return g
		}
	}
	t.Fatalf("no canary group %q in %+v", service, list.Items)
	return apiv1.CanaryGroup{}
}

func TestCanaryListEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	for i, when := range []string{"no generation", "no canary group"} {
		if i > 0 {
			e.publish(specWith(95, 5), "")
		}
		r := e.do(call{method: "GET", path: "/api/v1/canary"}).want(t, http.StatusOK)
		if strings.TrimSpace(string(r.body)) != `{"items":[]}` {
			t.Errorf("%s: body %s", when, r.body)
		}
	}
}

// TestCanaryListStates walks every state a group can be in, each on its own
// service of one generation.
func TestCanaryListStates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	b := spectest.Canary(95, 5).Analysis(analysis(true)).
		Route("web", "/", "api-stable").
		Split("promoted", "/promoted", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(true)).
		Split("paused", "/paused", spectest.T("api-stable", 50), spectest.T("api-canary", 50)).Analysis(analysis(true)).
		Split("complete", "/complete", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(true)).
		Split("all-in", "/all-in", spectest.T("api-stable", 0), spectest.T("api-canary", 100)).Analysis(analysis(true)).
		Split("rolled-back", "/rolled-back", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(true)).
		Split("stepped-back", "/stepped-back", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(true)).
		Split("disabled", "/disabled", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(false)).
		Split("plain", "/plain", spectest.T("api-stable", 90), spectest.T("api-canary", 10))
	g := e.publish(b, "")
	c := e.newController()
	ctx := context.Background()
	promoted := c.act(g.ID, "promoted", apiv1.CanaryPromote, 10, 15, 10)
	pause, err := e.store.HoldCanary(ctx, g.ID, "paused", true, 50, "alice", "look")
	if err != nil {
		t.Fatal(err)
	}
	c.act(g.ID, "complete", apiv1.CanaryPromote, 10, 100, 10)
	rolledBack := c.act(g.ID, "rolled-back", apiv1.CanarySevereRollback, 10, 0, 10)
	c.act(g.ID, "stepped-back", apiv1.CanaryRollback, 10, 5, 10)
	if _, err := e.store.HoldCanary(ctx, g.ID, "disabled", true, 10, "alice", ""); err != nil {
		t.Fatal(err)
	}

	list := e.canaryList()
	var services []string
	for _, it := range list.Items {
		services = append(services, it.Service)
	}
	if want := []string{"api", "promoted", "paused", "complete", "all-in", "rolled-back", "stepped-back", "disabled"}; !slices.Equal(services, want) {
		t.Fatalf("groups %v, want %v (in spec order, only splits with canary analysis)", services, want)
	}
	tests := []struct {
		service           string
		state             string
		configured, force [2]int
		transient         bool
		last              int64
	}{
		{"api", apiv1.CanaryRunning, [2]int{95, 5}, [2]int{95, 5}, false, 0},
		{"promoted", apiv1.CanaryRunning, [2]int{90, 10}, [2]int{85, 15}, true, promoted.ID},
		{"paused", apiv1.CanaryPaused, [2]int{50, 50}, [2]int{50, 50}, false, pause.ID},
		{"complete", apiv1.CanaryComplete, [2]int{90, 10}, [2]int{0, 100}, true, -1},
		{"all-in", apiv1.CanaryComplete, [2]int{0, 100}, [2]int{0, 100}, false, 0},
		{"rolled-back", apiv1.CanaryRolledBack, [2]int{90, 10}, [2]int{100, 0}, true, rolledBack.ID},
		{"stepped-back", apiv1.CanaryRunning, [2]int{90, 10}, [2]int{95, 5}, true, -1},
		{"disabled", apiv1.CanaryDisabled, [2]int{90, 10}, [2]int{90, 10}, false, -1},
	}
	for _, tt := range tests {
		got := group(t, list, tt.service)
		if got.State != tt.state || got.Configured != tt.configured || got.Weights != tt.force || got.Transient != tt.transient ||
			got.GenerationID != g.ID || got.Baseline != "api-stable" || got.Canary != "api-canary" || got.WindowSeconds != 60 {
			t.Errorf("%s = %+v; want state %s, configured %v, weights %v, transient %t",
				tt.service, got, tt.state, tt.configured, tt.force, tt.transient)
		}
		switch {
		case tt.last == 0 && got.LastEvent != nil:
			t.Errorf("%s: last event %+v, want none", tt.service, got.LastEvent)
		case tt.last != 0 && got.LastEvent == nil:
			t.Errorf("%s: no last event", tt.service)
		case tt.last > 0 && got.LastEvent.ID != tt.last:
			t.Errorf("%s: last event %+v, want %d", tt.service, got.LastEvent, tt.last)
		}
	}
	if last := group(t, list, "paused").LastEvent; last.Action != apiv1.CanaryPause || last.Actor != "alice" || last.Reason != "look" {
		t.Errorf("paused: last event %+v", last)
	}
	if last := group(t, list, "rolled-back").LastEvent; last.Action != apiv1.CanarySevereRollback || last.PValue == nil || last.Canary == nil {
		t.Errorf("rolled-back: last event %+v", last)
	}

	// A new generation that leaves the groups as they were carries their
	// canaries over: the weights in force, a rollback, the last event.
	e.publish(b.Edit(func(s *config.Spec) { s.Services[1].BasePath = "/web" }), "")
	list = e.canaryList()
	if got := group(t, list, "promoted"); !got.Transient || got.Weights != [2]int{85, 15} || got.State != apiv1.CanaryRunning ||
		got.LastEvent == nil || got.LastEvent.ID != promoted.ID {
		t.Errorf("promoted after an unrelated publish = %+v", got)
	}
	if got := group(t, list, "rolled-back"); got.Weights != [2]int{100, 0} || got.State != apiv1.CanaryRolledBack {
		t.Errorf("rolled-back after an unrelated publish = %+v", got)
	}
	// One that changes a group's settings starts that canary afresh from
	// its configured weights; the hold lasts.
	e.publish(b.Edit(func(s *config.Spec) {
		s.Services[1].BasePath = "/web"
		for i := range s.Services {
			if sp := s.Services[i].Split; sp != nil && sp.CanaryAnalysis != nil {
				sp.CanaryAnalysis.MinRequests = 77
			}
		}
	}), "")
	list = e.canaryList()
	if got := group(t, list, "promoted"); got.Transient || got.Weights != [2]int{90, 10} || got.State != apiv1.CanaryRunning || got.LastEvent != nil {
		t.Errorf("promoted in the next generation = %+v", got)
	}
	if got := group(t, list, "paused"); got.State != apiv1.CanaryPaused || got.LastEvent != nil {
		t.Errorf("paused in the next generation = %+v", got)
	}
}

func TestCanaryListWindows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := e.publish(canarySpec(95, 5), "")
	ctx := context.Background()
	fast, slow := canary.BucketOf(10*time.Millisecond), canary.BucketOf(200*time.Millisecond)
	flush := func(instance string, rows ...db.CanaryWindowRow) {
		t.Helper()
		if err := e.store.FlushCanaryWindows(ctx, instance, rows); err != nil {
			t.Fatal(err)
		}
	}
	// Two instances' rows add up; another generation's do not count.
	flush("gw-1",
		db.CanaryWindowRow{Generation: g.ID, Service: "api", Version: db.VersionBaseline, Requests: 150, Errors: 1,
			Latency: [][2]uint64{{uint64(fast), 150}}},
		db.CanaryWindowRow{Generation: g.ID, Service: "api", Version: db.VersionCanary, Requests: 10, Errors: 1,
			Latency: [][2]uint64{{uint64(fast), 9}, {uint64(slow), 1}}},
		db.CanaryWindowRow{Generation: g.ID + 1, Service: "api", Version: db.VersionCanary, Requests: 1000, Errors: 1000})
	flush("gw-2",
		db.CanaryWindowRow{Generation: g.ID, Service: "api", Version: db.VersionBaseline, Requests: 50, Errors: 1,
			Latency: [][2]uint64{{uint64(fast), 50}}},
		db.CanaryWindowRow{Generation: g.ID, Service: "api", Version: db.VersionCanary, Requests: 10, Errors: 0,
			Latency: [][2]uint64{{uint64(fast), 10}}})

	got := group(t, e.canaryList(), "api")
	wantB := apiv1.CanaryFigures{Requests: 200, Errors: 2, ErrorRate: 0.01, LatencyP99: canary.BucketValue(fast).Seconds()}
	// 20 canary requests: the 99th percentile is the slowest.
	wantC := apiv1.CanaryFigures{Requests: 20, Errors: 1, ErrorRate: 0.05, LatencyP99: canary.BucketValue(slow).Seconds()}
	if got.BaselineWindow != wantB || got.CanaryWindow != wantC {
		t.Errorf("windows: baseline %+v, canary %+v; want %+v, %+v", got.BaselineWindow, got.CanaryWindow, wantB, wantC)
	}
	if got.State != apiv1.CanaryRunning {
		t.Errorf("state %s", got.State)
	}
}

func TestCanaryEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g1 := e.publish(canarySpec(95, 5), "")
	c := e.newController()
	var ids []int64
	ids = append(ids, c.act(g1.ID, "api", apiv1.CanaryPromote, 5, 10, 5).ID)
	ids = append(ids, c.act(g1.ID, "api", apiv1.CanaryPromote, 10, 15, 5).ID)
	ids = append(ids, c.act(g1.ID, "other", apiv1.CanaryPromote, 0, 5, 0).ID)
	g2 := e.publish(canarySpec(90, 10), "")
	ids = append(ids, c.act(g2.ID, "api", apiv1.CanaryRollback, 10, 5, 10).ID)
	hold, err := e.store.HoldCanary(context.Background(), g2.ID, "api", true, 5, "carol", "hold on")
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, hold.ID)

	page := func(query string) apiv1.CanaryEventList {
		t.Helper()
		var p apiv1.CanaryEventList
		e.do(call{method: "GET", path: "/api/v1/canary/events" + query}).want(t, http.StatusOK).decode(t, &p)
		return p
	}
	eventIDs := func(p apiv1.CanaryEventList) []int64 {
		var out []int64
		for _, ev := range p.Items {
			out = append(out, ev.ID)
		}
		return out
	}
	tests := []struct {
		query string
		want  []int64
		next  string
	}{
		{"", []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, ""},
		{"?limit=2", []int64{ids[4], ids[3]}, fmt.Sprint(ids[3])},
		{fmt.Sprintf("?limit=2&cursor=%d", ids[3]), []int64{ids[2], ids[1]}, fmt.Sprint(ids[1])},
		{fmt.Sprintf("?limit=2&cursor=%d", ids[1]), []int64{ids[0]}, ""},
		{"?limit=5", []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, ""},
		{"?service=api", []int64{ids[4], ids[3], ids[1], ids[0]}, ""},
		{"?generation=1", []int64{ids[2], ids[1], ids[0]}, ""},
		{"?service=api&generation=1&limit=1", []int64{ids[1]}, fmt.Sprint(ids[1])},
		{fmt.Sprintf("?service=api&generation=1&limit=1&cursor=%d", ids[1]), []int64{ids[0]}, ""},
		{fmt.Sprintf("?service=api&generation=1&limit=1&cursor=%d", ids[0]), nil, ""},
		{"?service=&generation=2", []int64{ids[4], ids[3]}, ""},
		{"?service=nope", nil, ""},
	}
	for _, tt := range tests {
		p := page(tt.query)
		if got := eventIDs(p); !slices.Equal(got, tt.want) || p.NextCursor != tt.next {
			t.Errorf("%q: ids %v next %q; want %v next %q", tt.query, got, p.NextCursor, tt.want, tt.next)
		}
	}
	if r := e.do(call{method: "GET", path: "/api/v1/canary/events?service=nope"}); !strings.Contains(string(r.body), `"items":[]`) {
		t.Errorf("an empty page is %s; want an empty items array", r.body)
	}
	p := page("?limit=1")
	if ev := p.Items[0]; ev.Action != apiv1.CanaryPause || ev.Actor != "carol" || ev.Reason != "hold on" || ev.GenerationID != g2.ID ||
		ev.FromWeight != 5 || ev.ToWeight != 5 || ev.Baseline != nil || ev.PValue != nil {
		t.Errorf("newest event %+v", ev)
	}

	for _, tt := range []struct{ query, path string }{
		{"?limit=0", "limit"},
		{"?limit=501", "limit"},
		{"?limit=x", "limit"},
		{"?cursor=0", "cursor"},
		{"?cursor=abc", "cursor"},
		{"?generation=0", "generation"},
		{"?generation=two", "generation"},
		{"?generation=", "generation"},
	} {
		p := e.do(call{method: "GET", path: "/api/v1/canary/events" + tt.query, violates: true}).want(t, http.StatusBadRequest).problem(t)
		if !slices.Equal(paths(p), []string{tt.path}) {
			t.Errorf("%s: errors %v, want one at %s", tt.query, p.Errors, tt.path)
		}
	}
}

func TestCanaryAdopt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	adopt := func(c call) *response {
		t.Helper()
		c.method, c.path = "POST", "/api/v1/services/"+c.path+"/canary/adopt"
		return e.do(c)
	}
	p := adopt(call{path: "api"}).want(t, http.StatusNotFound).problem(t)
	if !strings.Contains(p.Detail, "no generation has been published yet") {
		t.Errorf("adopt before any generation: %+v", p)
	}
	g1 := e.publish(canarySpec(95, 5), "")

	p = adopt(call{path: "api"}).want(t, http.StatusConflict).problem(t)
	if !strings.Contains(p.Detail, "no transient weights to adopt") {
		t.Errorf("adopt with no controller action: %+v", p)
	}
	c := e.newController()
	c.act(g1.ID, "api", apiv1.CanaryPromote, 5, 10, 5)
	c.act(g1.ID, "api", apiv1.CanaryPromote, 10, 15, 5)

	r := adopt(call{path: "api", header: map[string]string{"X-Dwara-Actor": "dana"}}).want(t, http.StatusCreated)
	g2 := r.generation(t)
	if g2.ID != g1.ID+1 || g2.Action != apiv1.ActionAdopt || g2.Author != "dana" || g2.Message != "adopt canary weights 85/15 of api" {
		t.Errorf("adopted generation %+v", g2)
	}
	if ws := weightsOf(t, g2, "api"); !slices.Equal(ws, []int{85, 15}) {
		t.Errorf("adopted weights %v, want [85 15]", ws)
	}
	if loc, tag := r.header.Get("Location"), r.header.Get("ETag"); loc != fmt.Sprintf("/api/v1/generations/%d", g2.ID) || tag != fmt.Sprintf(`"%d"`, g2.ID) {
		t.Errorf("Location %q, ETag %q", loc, tag)
	}
	// Only the weights changed.
	spec, err := decodeSpec(g2)
	if err != nil {
		t.Fatal(err)
	}
	if svc, _ := spec.Service("api"); svc.Split.CanaryAnalysis == nil || !svc.Split.CanaryAnalysis.Enabled {
		t.Errorf("the adopted spec lost the canary analysis: %+v", svc.Split)
	}
	if ws := weightsOf(t, g2, "tri"); !slices.Equal(ws, []int{1, 1, 1}) {
		t.Errorf("tri weights %v", ws)
	}
	if got := group(t, e.canaryList(), "api"); got.Configured != [2]int{85, 15} || got.Weights != [2]int{85, 15} || got.Transient {
		t.Errorf("after adopt the group is %+v", got)
	}
	if a := e.lastAudit(); a.Action != apiv1.ActionAdopt || a.Outcome != apiv1.OutcomeAccepted || a.Actor != "dana" ||
		a.Status != http.StatusCreated || a.GenerationID == nil || *a.GenerationID != g2.ID {
		t.Errorf("audit entry %+v", a)
	}

	// Nothing transient in the new generation; then back at the configured
	// weight, which is nothing to adopt either.
	p = adopt(call{path: "api"}).want(t, http.StatusConflict).problem(t)
	if !strings.Contains(p.Detail, "has not changed the weights") {
		t.Errorf("adopt right after adopt: %+v", p)
	}
	c.act(g2.ID, "api", apiv1.CanaryPromote, 15, 20, 15)
	c.act(g2.ID, "api", apiv1.CanaryRollback, 20, 15, 15)
	p = adopt(call{path: "api"}).want(t, http.StatusConflict).problem(t)
	if !strings.Contains(p.Detail, "no transient weights to adopt") || !strings.Contains(p.Detail, "85/15") {
		t.Errorf("adopt of the configured weights: %+v", p)
	}
	a := e.lastAudit()
	if a.Action != apiv1.ActionAdopt || a.Outcome != apiv1.OutcomeRefused || a.Status != http.StatusConflict {
		t.Errorf("audit of a refused adopt %+v", a)
	}

	// If-Match and a message.
	c.act(g2.ID, "api", apiv1.CanarySevereRollback, 15, 0, 15)
	adopt(call{path: "api", header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, g1.ID)}}).want(t, http.StatusPreconditionFailed)
	g3 := adopt(call{path: "api", header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, g2.ID)}, body: map[string]any{"message": "keep it off"}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g3, "api"); !slices.Equal(ws, []int{100, 0}) || g3.Message != "keep it off" || g3.Action != apiv1.ActionAdopt {
		t.Errorf("adopt of a rollback: %+v, weights %v", g3, ws)
	}

	for _, tt := range []struct {
		service string
		status  int
	}{
		{"nope", http.StatusNotFound},
		{"web", http.StatusConflict},
		{"tri", http.StatusConflict},
	} {
		p := adopt(call{path: tt.service}).want(t, tt.status).problem(t)
		if !strings.Contains(p.Detail, `"`+tt.service+`"`) {
			t.Errorf("adopt %s: %+v", tt.service, p)
		}
	}
	adopt(call{path: "api", body: map[string]any{"message": strings.Repeat("x", apiv1.MaxMessageLen+1)}, violates: true}).
		want(t, http.StatusUnprocessableEntity)
	if n := e.generationCount(); n != 3 {
		t.Errorf("%d generations, want 3", n)
	}
}

func TestCanaryPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	hold := func(verb, service string, c call) *response {
		t.Helper()
		c.method, c.path = "POST", "/api/v1/services/"+service+"/canary/"+verb
		return e.do(c)
	}
	groupOf := func(r *response) apiv1.CanaryGroup {
		t.Helper()
		var g apiv1.CanaryGroup
		r.decode(t, &g)
		return g
	}
	hold("pause", "api", call{}).want(t, http.StatusNotFound)
	g1 := e.publish(canarySpec(95, 5), "")
	c := e.newController()
	c.act(g1.ID, "api", apiv1.CanaryPromote, 5, 10, 5)

	got := groupOf(hold("pause", "api", call{header: map[string]string{"X-Dwara-Actor": "erin"}, body: map[string]any{"message": "errors in EU"}}).
		want(t, http.StatusOK))
	if got.State != apiv1.CanaryPaused || got.Weights != [2]int{90, 10} || got.LastEvent == nil ||
		got.LastEvent.Action != apiv1.CanaryPause || got.LastEvent.Actor != "erin" || got.LastEvent.Reason != "errors in EU" ||
		got.LastEvent.FromWeight != 10 || got.LastEvent.ToWeight != 10 {
		t.Fatalf("after pause: %+v (last event %+v)", got, got.LastEvent)
	}
	pauseID := got.LastEvent.ID
	if a := e.lastAudit(); a.Action != "canary_pause" || a.Outcome != apiv1.OutcomeAccepted || a.Actor != "erin" ||
		a.Status != http.StatusOK || a.GenerationID == nil || *a.GenerationID != g1.ID {
		t.Errorf("audit of the pause: %+v", a)
	}
	// Again: the same answer, nothing recorded.
	got = groupOf(hold("pause", "api", call{}).want(t, http.StatusOK))
	if got.State != apiv1.CanaryPaused || got.LastEvent == nil || got.LastEvent.ID != pauseID {
		t.Errorf("after a second pause: %+v", got)
	}
	if a := e.lastAudit(); a.Action != "canary_pause" || a.Outcome != apiv1.OutcomeUnchanged || a.Status != http.StatusOK {
		t.Errorf("audit of the second pause: %+v", a)
	}
	if g := group(t, e.canaryList(), "api"); g.State != apiv1.CanaryPaused {
		t.Errorf("listed state %s", g.State)
	}

	got = groupOf(hold("resume", "api", call{}).want(t, http.StatusOK))
	if got.State != apiv1.CanaryRunning || got.LastEvent == nil || got.LastEvent.Action != apiv1.CanaryResume ||
		got.LastEvent.Reason != "resume canary of api" || got.LastEvent.Actor != "anonymous" {
		t.Errorf("after resume: %+v (last event %+v)", got, got.LastEvent)
	}
	if a := e.lastAudit(); a.Action != "canary_resume" || a.Outcome != apiv1.OutcomeAccepted {
		t.Errorf("audit of the resume: %+v", a)
	}
	hold("resume", "api", call{}).want(t, http.StatusOK)
	if a := e.lastAudit(); a.Action != "canary_resume" || a.Outcome != apiv1.OutcomeUnchanged {
		t.Errorf("audit of the second resume: %+v", a)
	}
	events, err := e.store.ListCanaryEvents(context.Background(), "api", 0, 10, 0)
	if err != nil || len(events) != 3 {
		t.Errorf("events %+v, %v; want the promote, one pause and one resume", events, err)
	}
	// The default reason of a pause.
	if got := groupOf(hold("pause", "api", call{}).want(t, http.StatusOK)); got.LastEvent.Reason != "pause canary of api" {
		t.Errorf("default pause reason %q", got.LastEvent.Reason)
	}

	for _, tt := range []struct {
		verb, service string
		status        int
	}{
		{"pause", "nope", http.StatusNotFound},
		{"resume", "nope", http.StatusNotFound},
		{"pause", "web", http.StatusConflict},
		{"resume", "tri", http.StatusConflict},
	} {
		p := hold(tt.verb, tt.service, call{}).want(t, tt.status).problem(t)
		if !strings.Contains(p.Detail, `"`+tt.service+`"`) {
			t.Errorf("%s %s: %+v", tt.verb, tt.service, p)
		}
		if a := e.lastAudit(); a.Action != "canary_"+tt.verb || a.Outcome != apiv1.OutcomeRefused || a.Status != tt.status {
			t.Errorf("%s %s: audit %+v", tt.verb, tt.service, a)
		}
	}
	hold("pause", "api", call{body: `{"message": 7}`, violates: true}).want(t, http.StatusUnprocessableEntity)
	hold("pause", "api", call{body: "message: x", contentType: "application/yaml", violates: true}).want(t, http.StatusUnsupportedMediaType)
	if n := e.generationCount(); n != 1 {
		t.Errorf("holds published generations: %d, want 1", n)
	}
}

func TestCanaryAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := newEnv(t, Options{Token: token})
	bearer := map[string]string{"Authorization": "Bearer " + token}
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": canarySpec(95, 5)}, header: bearer}).
		want(t, http.StatusCreated)
	tests := []struct {
		method, path string
		authorized   int
	}{
		{"GET", "/api/v1/canary", http.StatusOK},
		{"GET", "/api/v1/canary/events", http.StatusOK},
		{"POST", "/api/v1/services/api/canary/adopt", http.StatusConflict},
		{"POST", "/api/v1/services/api/canary/pause", http.StatusOK},
		{"POST", "/api/v1/services/api/canary/resume", http.StatusOK},
	}
	for _, tt := range tests {
		r := e.do(call{method: tt.method, path: tt.path}).want(t, http.StatusUnauthorized)
		if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: WWW-Authenticate %q", tt.method, tt.path, r.header.Get("WWW-Authenticate"))
		}
		e.do(call{method: tt.method, path: tt.path, header: bearer}).want(t, tt.authorized)
	}
	var page apiv1.AuditList
	e.do(call{method: "GET", path: "/api/v1/audit", header: bearer}).want(t, http.StatusOK).decode(t, &page)
	var refused []string
	for _, a := range page.Items {
		if a.Status == http.StatusUnauthorized && a.Actor == "unauthenticated" {
			refused = append(refused, a.Action)
		}
	}
	if want := []string{"canary_resume", "canary_pause", "adopt"}; !slices.Equal(refused, want) {
		t.Errorf("refused audit actions %v, want %v", refused, want)
	}
	if events, err := e.store.ListCanaryEvents(context.Background(), "", 0, 10, 0); err != nil || len(events) != 2 {
		t.Errorf("events %+v, %v; want the authorized pause and resume only", events, err)
	}
}

// TestCanaryManagedAndGate shows a split managed by something else as
// managed, with its manager, and refuses a promote with 409 while no gate
// waits; an invalid manager is refused with 422 naming the field.
func TestCanaryManagedAndGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	b := spectest.Canary(90, 10).Analysis(analysis(true)).Edit(func(s *config.Spec) { s.Services[0].Split.ManagedBy = "argo-rollouts" })
	e.publish(b, "")
	if got := group(t, e.canaryList(), "api"); got.State != apiv1.CanaryManaged || got.ManagedBy != "argo-rollouts" || got.GateWaiting || got.HoldSince != nil {
		t.Errorf("managed group = %+v", got)
	}
	r := e.do(call{method: "POST", path: "/api/v1/services/api/canary/promote", body: map[string]any{}}).want(t, http.StatusConflict)
	if !strings.Contains(string(r.body), "no gate waits") {
		t.Errorf("promote with no gate: %s", r.body)
	}
	bad := spectest.Canary(90, 10).Edit(func(s *config.Spec) { s.Services[0].Split.ManagedBy = "Argo!" })
	r = e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": bad}, violates: true}).want(t, http.StatusUnprocessableEntity)
	if !strings.Contains(string(r.body), "services[0].split.managed_by") {
		t.Errorf("invalid manager: %s", r.body)
	}
}

// TestCanarySchedule follows a schedule 1 -> 5 -> 25 -> 100 with a hold and
// the final gate through GET /api/v1/canary: the steps as weights with the
// step in force, the hold running with what is left of it, the step up and
// whether it waits, the gate waiting and passed by a promote. A group that
// moves by step has no schedule, gate auto, and the step up by step.
func TestCanarySchedule(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	ca := analysis(true)
	ca.Step, ca.Steps, ca.HoldSeconds, ca.Gate = 0, []int{1, 5, 25, 100}, 300, config.GateFinal
	g := e.publish(spectest.Canary(99, 1).Analysis(ca).
		Split("plain", "/plain", spectest.T("api-stable", 90), spectest.T("api-canary", 10)).Analysis(analysis(true)), "")
	c := e.newController()

	type want struct {
		step      int
		weights   [2]int
		holding   bool
		gate      bool
		next      int
		nextGated bool
		state     string
	}
	check := func(when string, w want) apiv1.CanaryGroup {
		t.Helper()
		got := group(t, e.canaryList(), "api")
		if got.Schedule == nil {
			t.Fatalf("%s: no schedule in %+v", when, got)
		}
		sc := *got.Schedule
		if !slices.Equal(sc.Steps, []int{1, 5, 25, 100}) || !slices.Equal(sc.Weights, []int{1, 5, 25, 100}) || sc.Step != w.step {
			t.Errorf("%s: schedule %+v, want steps and weights [1 5 25 100] at step %d", when, sc, w.step)
		}
		if got.Weights != w.weights || got.GateWaiting != w.gate || got.NextWeight != w.next || got.NextGated != w.nextGated ||
			got.State != w.state || got.Gate != config.GateFinal || got.HoldSeconds != 300 {
			t.Errorf("%s: weights %v, gate_waiting %v, next %d (gated %v), state %s, gate %q, hold_seconds %d; want %v, %v, %d (%v), %s, final, 300",
				when, got.Weights, got.GateWaiting, got.NextWeight, got.NextGated, got.State, got.Gate, got.HoldSeconds,
				w.weights, w.gate, w.next, w.nextGated, w.state)
		}
		switch {
		case w.holding && (got.HoldSince == nil || got.HoldLeftSeconds == nil):
			t.Errorf("%s: hold_since %v, hold_left_seconds %v; want a hold running", when, got.HoldSince, got.HoldLeftSeconds)
		case w.holding && (*got.HoldLeftSeconds <= 250 || *got.HoldLeftSeconds > 300):
			t.Errorf("%s: hold_left_seconds %v, want a little under 300 (the hold just started)", when, *got.HoldLeftSeconds)
		case !w.holding && (got.HoldSince != nil || got.HoldLeftSeconds != nil):
			t.Errorf("%s: hold_since %v, hold_left_seconds %v; want no hold", when, got.HoldSince, got.HoldLeftSeconds)
		}
		return got
	}

	check("at the start", want{step: 0, weights: [2]int{99, 1}, next: 5, state: apiv1.CanaryRunning})
	c.act(g.ID, "api", apiv1.CanaryHold, 1, 1, 1)
	check("holding at 1", want{step: 0, weights: [2]int{99, 1}, holding: true, next: 5, state: apiv1.CanaryRunning})
	c.act(g.ID, "api", apiv1.CanaryPromote, 1, 5, 1)
	check("at 5", want{step: 1, weights: [2]int{95, 5}, next: 25, state: apiv1.CanaryRunning})
	c.act(g.ID, "api", apiv1.CanaryPromote, 5, 25, 1)
	check("at 25", want{step: 2, weights: [2]int{75, 25}, next: 100, nextGated: true, state: apiv1.CanaryRunning})
	c.act(g.ID, "api", apiv1.CanaryHold, 25, 25, 1)
	c.act(g.ID, "api", apiv1.CanaryGate, 25, 25, 1)
	check("at the gate", want{step: 2, weights: [2]int{75, 25}, gate: true, next: 100, nextGated: true, state: apiv1.CanaryRunning})

	var passed apiv1.CanaryGroup
	e.do(call{method: "POST", path: "/api/v1/services/api/canary/promote", body: map[string]any{}}).want(t, http.StatusOK).decode(t, &passed)
	if passed.Schedule == nil || passed.Schedule.Step != 3 || passed.Weights != [2]int{0, 100} {
		t.Errorf("the promote's answer: %+v, want step 3 at 0/100", passed)
	}
	check("through the gate", want{step: 3, weights: [2]int{0, 100}, next: 100, state: apiv1.CanaryComplete})
	c.act(g.ID, "api", apiv1.CanarySevereRollback, 100, 0, 1)
	check("rolled back", want{step: -1, weights: [2]int{100, 0}, next: 1, state: apiv1.CanaryRolledBack})

	r := e.do(call{method: "GET", path: "/api/v1/canary"}).want(t, http.StatusOK)
	var raw struct {
		Items []map[string]any `json:"items"`
	}
	r.decode(t, &raw)
	for _, item := range raw.Items {
		if item["service"] != "plain" {
			continue
		}
		if _, ok := item["schedule"]; ok || item["gate"] != "auto" || item["next_weight"] != 15.0 || item["next_gated"] != false ||
			item["hold_seconds"] != 0.0 || item["hold_left_seconds"] != nil {
			t.Errorf("the group without steps: %v; want no schedule, gate auto, next_weight 15, no hold", item)
		}
	}
}
