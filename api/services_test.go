package api

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

func TestFlip(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")

	g := e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"X-Dwara-Actor": "carol"}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{10, 90}) {
		t.Errorf("after flip weights = %v, want [10 90]", ws)
	}
	if g.Action != apiv1.ActionFlip || g.Author != "carol" || g.ID != 2 || *g.ParentID != 1 {
		t.Errorf("flip generation = %+v", g)
	}
	g = e.do(call{method: "POST", path: "/api/v1/services/api/flip", body: map[string]any{"message": "back"}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{90, 10}) || g.Message != "back" {
		t.Errorf("after second flip weights = %v, message %q", ws, g.Message)
	}
	// Other services are untouched.
	if ws := weightsOf(t, g, "tri"); !slices.Equal(ws, []int{1, 1, 1}) {
		t.Errorf("tri weights = %v", ws)
	}
	if a := e.lastAudit(); a.Action != apiv1.ActionFlip || a.Outcome != "accepted" || a.GenerationID == nil || *a.GenerationID != 3 {
		t.Errorf("audit entry = %+v", a)
	}
}

func TestServiceEditRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	// No generation yet: no service.
	e.do(call{method: "POST", path: "/api/v1/services/api/flip"}).want(t, http.StatusNotFound).problem(t)
	e.publish(specWith(95, 5), "")

	tests := []struct {
		name   string
		call   call
		status int
		path   string
	}{
		{"flip a 3-target split", call{method: "POST", path: "/api/v1/services/tri/flip"}, 409, ""},
		{"flip a single upstream", call{method: "POST", path: "/api/v1/services/web/flip"}, 409, ""},
		{"flip an unknown service", call{method: "POST", path: "/api/v1/services/nope/flip"}, 404, ""},
		{"kill a single upstream", call{method: "POST", path: "/api/v1/services/web/kill"}, 409, ""},
		{"kill an unknown service", call{method: "POST", path: "/api/v1/services/nope/kill"}, 404, ""},
		{"weights of a single upstream", call{method: "PUT", path: "/api/v1/services/web/weights", body: map[string]any{"weights": map[string]int{"api-stable": 2}}}, 409, ""},
		{"weights of an unknown service", call{method: "PUT", path: "/api/v1/services/nope/weights", body: map[string]any{"weights": map[string]int{"a": 1}}}, 404, ""},
		{"weights change the total", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-canary": 20}}}, 422, "weights"},
		{"weights name no target", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-next": 5, "api-stable": 90}}}, 422, "weights"},
		{"weights empty", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{}}, violates: true}, 422, "weights"},
		{"weights name a target twice", call{method: "PUT", path: "/api/v1/services/api/weights", body: `{"weights": {"api-stable": 90, "api-canary": 10, "api-stable": 80}}`}, 422, "weights.api-stable"},
		{"message given twice", call{method: "POST", path: "/api/v1/services/api/kill", body: `{"message": "a", "message": "b"}`}, 422, "message"},
		{"weights missing", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{}, violates: true}, 422, "weights"},
		{"weights no body", call{method: "PUT", path: "/api/v1/services/api/weights", violates: true}, 422, "body"},
		{"weights not integers", call{method: "PUT", path: "/api/v1/services/api/weights", body: `{"weights": {"api-stable": "ninety"}}`, violates: true}, 422, "weights"},
		{"weights negative", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-stable": -1, "api-canary": 101}}, violates: true}, 422, ""},
		{"flip with a stale If-Match", call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"If-Match": `"9"`}}, 412, ""},
		{"flip with a YAML body", call{method: "POST", path: "/api/v1/services/api/flip", body: "message: x", contentType: "application/yaml", violates: true}, 415, ""},
		{"kill with an unknown field", call{method: "POST", path: "/api/v1/services/api/kill", body: map[string]any{"reason": "x"}, violates: true}, 422, "reason"},
	}
	// The refusals run in parallel; the checks below wait for all of them.
	t.Run("refusals", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c := tt.call
				c.header = mergeHeader(c.header, "X-Request-Id", "edit-"+strings.ReplaceAll(tt.name, " ", "-"))
				p := e.in(t).do(c).want(t, tt.status).problem(t)
				if tt.path != "" && !slices.Contains(paths(p), tt.path) {
					t.Errorf("errors %v lack path %q", p.Errors, tt.path)
				}
			})
		}
	})
	if t.Failed() {
		return
	}
	if n := e.generationCount(); n != 1 {
		t.Errorf("%d generations after refused edits, want 1", n)
	}
	byID := map[string]apiv1.AuditEntry{}
	for _, a := range e.audit() {
		byID[a.ClientRequestID] = a
	}
	for _, tt := range tests {
		a, ok := byID["edit-"+strings.ReplaceAll(tt.name, " ", "-")]
		if !ok || a.Outcome != "refused" || a.Status != tt.status || !strings.Contains(tt.call.path, "/"+a.Action) {
			t.Errorf("%s: audit entry %+v (found %t)", tt.name, a, ok)
		}
	}
}

func TestWeights(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(95, 5), "")

	g := e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
		body: map[string]any{"weights": map[string]int{"api-stable": 90, "api-canary": 10}, "message": "ramp"}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{90, 10}) || g.Action != apiv1.ActionWeights || g.Message != "ramp" {
		t.Errorf("weights generation = %+v, weights %v", g, ws)
	}
	p := e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
		body: map[string]any{"weights": map[string]int{"api-canary": 20}}}).want(t, http.StatusUnprocessableEntity).problem(t)
	if len(p.Errors) != 1 || p.Errors[0].Path != "weights" || !strings.Contains(p.Errors[0].Message, "100") {
		t.Errorf("total change errors = %v", p.Errors)
	}
	g = e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
		body: map[string]any{"weights": map[string]int{"api-canary": 20}, "allow_reshuffle": true}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{90, 20}) {
		t.Errorf("reshuffled weights = %v, want [90 20]", ws)
	}
}

func TestKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")
	g := e.do(call{method: "POST", path: "/api/v1/services/api/kill", body: map[string]any{"message": "errors spiking"}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{100, 0}) || g.Action != apiv1.ActionKill || g.Message != "errors spiking" {
		t.Errorf("kill generation = %+v, weights %v", g, ws)
	}
	g = e.do(call{method: "POST", path: "/api/v1/services/tri/kill"}).want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "tri"); !slices.Equal(ws, []int{3, 0, 0}) || g.Message != "kill tri" {
		t.Errorf("kill of tri: weights %v, message %q", ws, g.Message)
	}
}

func TestServiceEditIfMatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")
	e.publish(specWith(80, 20), "")
	e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"If-Match": `"1"`}}).
		want(t, http.StatusPreconditionFailed)
	g := e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"If-Match": `"2"`}}).
		want(t, http.StatusCreated).generation(t)
	if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{20, 80}) {
		t.Errorf("weights = %v", ws)
	}
}

// Concurrent edits without If-Match serialise: none is lost and none fails
// for another's sake. 50 parallel flips all answer 201, their generations
// are 50 consecutive ids, each the flip of its parent, and the weights end
// where they started (an even number of flips).
func TestServiceEditConcurrentFlipsSerialise(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{DatabaseTimeout: time.Minute})
	e.publish(specWith(90, 10), "")
	const n = 50
	statuses := make([]int, n)
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := e.do(call{method: "POST", path: "/api/v1/services/api/flip"})
			statuses[i] = r.status
			var g apiv1.Generation
			if json.Unmarshal(r.body, &g) == nil {
				ids[i] = g.ID
			}
		})
	}
	wg.Wait()
	for _, s := range statuses {
		if s != http.StatusCreated {
			t.Fatalf("statuses %v, want all 201", statuses)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i+2) {
			t.Fatalf("generation ids %v, want 2..%d", ids, n+1)
		}
	}
	gens, err := e.store.List(t.Context(), n+1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens[:n] {
		g, err := e.store.Get(t.Context(), g.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []int{10, 90}
		if g.ID%2 == 1 {
			want = []int{90, 10}
		}
		if ws := weightsOf(t, g, "api"); g.Action != apiv1.ActionFlip || *g.ParentID != g.ID-1 || !slices.Equal(ws, want) {
			t.Errorf("generation %d: action %s, parent %d, weights %v; want a flip of %d to %v", g.ID, g.Action, *g.ParentID, ws, g.ID-1, want)
		}
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(95, 5), "")
	e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
		body: map[string]any{"weights": map[string]int{"api-stable": 90, "api-canary": 10}}}).want(t, http.StatusCreated)
	e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
		body: map[string]any{"weights": map[string]int{"api-canary": 20}, "allow_reshuffle": true}}).want(t, http.StatusCreated)
	spec4 := specWith(90, 20).Edit(func(s *config.Spec) {
		s.Upstreams[0].Endpoints = []string{"127.0.0.1:9001", "127.0.0.1:9003"}
		s.Upstreams[1].Balancer = config.BalancerLeastConn
		s.Services = s.Services[:2] // tri removed
		s.Services[1].Upstream = "api-canary"
	})
	e.publish(spec4, "")

	diff := func(path string) apiv1.Diff {
		t.Helper()
		var d apiv1.Diff
		e.do(call{method: "GET", path: path}).want(t, http.StatusOK).decode(t, &d)
		return d
	}

	// 95/5 -> 90/10 keeps the total: exactly 5% of keys move.
	d := diff("/api/v1/generations/2/diff")
	if d.From == nil || *d.From != 1 || d.To == nil || *d.To != 2 {
		t.Errorf("from/to = %v/%v, want 1/2", d.From, d.To)
	}
	api := findService(t, d, "api")
	if api.Change != apiv1.ChangeModified || !near(api.MovedShare, 0.05) ||
		!slices.Equal(api.Details, []string{"weights api-stable 95->90", "weights api-canary 5->10"}) {
		t.Errorf("api = %+v", api)
	}
	if web := findService(t, d, "web"); web.Change != apiv1.ChangeUnchanged || web.MovedShare != 0 || len(web.Details) != 0 {
		t.Errorf("web = %+v", web)
	}

	// 90/10 -> 90/20 changes the total: keys reshuffle, by the exact share.
	d = diff("/api/v1/generations/3/diff")
	api = findService(t, d, "api")
	want := config.Displacement([]config.Target{{Upstream: "api-stable", Weight: 90}, {Upstream: "api-canary", Weight: 10}}, []config.Target{{Upstream: "api-stable", Weight: 90}, {Upstream: "api-canary", Weight: 20}})
	if !near(api.MovedShare, want) || want <= 0.1 || !slices.Contains(api.Details, "total weight 100->110 (keys reshuffled)") {
		t.Errorf("api = %+v, want moved_share %v", api, want)
	}

	// An explicit against: 1 -> 3.
	d = diff("/api/v1/generations/3/diff?against=1")
	api = findService(t, d, "api")
	want = config.Displacement([]config.Target{{Upstream: "api-stable", Weight: 95}, {Upstream: "api-canary", Weight: 5}}, []config.Target{{Upstream: "api-stable", Weight: 90}, {Upstream: "api-canary", Weight: 20}})
	if *d.From != 1 || !near(api.MovedShare, want) {
		t.Errorf("api against 1 = %+v, want moved_share %v", api, want)
	}

	// Upstream and routing changes, and a removed service.
	d = diff("/api/v1/generations/4/diff")
	if web := findService(t, d, "web"); web.Change != apiv1.ChangeModified || web.MovedShare != 1 ||
		!slices.Equal(web.Details, []string{"upstream api-stable->api-canary"}) {
		t.Errorf("web = %+v", web)
	}
	if tri := findService(t, d, "tri"); tri.Change != apiv1.ChangeRemoved || tri.MovedShare != 1 {
		t.Errorf("tri = %+v", tri)
	}
	if u := findUpstream(t, d, "api-stable"); u.Change != apiv1.ChangeModified ||
		!slices.Equal(u.Details, []string{"endpoint added 127.0.0.1:9003", "endpoint removed 127.0.0.1:9002"}) {
		t.Errorf("api-stable = %+v", u)
	}
	if u := findUpstream(t, d, "api-canary"); !slices.Equal(u.Details, []string{"balancer round_robin->least_conn"}) {
		t.Errorf("api-canary = %+v", u)
	}
	if u := findUpstream(t, d, "api-next"); u.Change != apiv1.ChangeUnchanged {
		t.Errorf("api-next = %+v", u)
	}

	// The first generation is compared with the empty spec.
	d = diff("/api/v1/generations/1/diff")
	if d.From != nil || len(d.Services) != 3 || findService(t, d, "api").Change != apiv1.ChangeAdded || findService(t, d, "api").MovedShare != 1 {
		t.Errorf("diff of the first generation = %+v", d)
	}
	// Against itself nothing changes.
	for _, s := range diff("/api/v1/generations/2/diff?against=2").Services {
		if s.Change != apiv1.ChangeUnchanged || s.MovedShare != 0 {
			t.Errorf("self diff %+v", s)
		}
	}

	e.do(call{method: "GET", path: "/api/v1/generations/9/diff"}).want(t, http.StatusNotFound).problem(t)
	e.do(call{method: "GET", path: "/api/v1/generations/2/diff?against=9"}).want(t, http.StatusNotFound).problem(t)
	p := e.do(call{method: "GET", path: "/api/v1/generations/2/diff?against=x", violates: true}).want(t, http.StatusBadRequest).problem(t)
	if !slices.Equal(paths(p), []string{"against"}) {
		t.Errorf("errors %v, want path against", p.Errors)
	}
}

func findService(t *testing.T, d apiv1.Diff, name string) apiv1.ServiceDiff {
	t.Helper()
	for _, s := range d.Services {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("service %q not in diff %+v", name, d)
	return apiv1.ServiceDiff{}
}

func findUpstream(t *testing.T, d apiv1.Diff, name string) apiv1.UpstreamDiff {
	t.Helper()
	for _, u := range d.Upstreams {
		if u.Name == name {
			return u
		}
	}
	t.Fatalf("upstream %q not in diff %+v", name, d)
	return apiv1.UpstreamDiff{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
