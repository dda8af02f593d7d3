package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

func TestCreateGeneration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	r := e.do(call{
		method: "POST", path: "/api/v1/generations",
		body:   map[string]any{"message": "first", "spec": specWith(95, 5)},
		header: map[string]string{"X-Dwara-Actor": "  alice  ", "X-Request-Id": "req-create-1"},
	}).want(t, http.StatusCreated)
	g := r.generation(t)

	if g.ID != 1 || g.ParentID != nil || g.Action != apiv1.ActionCreate || g.Author != "alice" || g.Message != "first" {
		t.Errorf("generation = %+v", g)
	}
	if got := r.header.Get("Location"); got != "/api/v1/generations/1" {
		t.Errorf("Location = %q", got)
	}
	if got := r.header.Get("ETag"); got != `"1"` {
		t.Errorf("ETag = %q", got)
	}
	if got := r.header.Get("X-Request-Id"); got != "req-create-1" {
		t.Errorf("X-Request-Id = %q, want the client's", got)
	}
	// The stored spec is the parsed, defaulted one.
	spec, err := decodeSpec(g)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Upstreams[0].Balancer != config.BalancerRoundRobin {
		t.Errorf("balancer = %q, want the default %q", spec.Upstreams[0].Balancer, config.BalancerRoundRobin)
	}
	got := e.do(call{method: "GET", path: r.header.Get("Location")}).want(t, http.StatusOK).generation(t)
	if !spectest.JSONEqual(t, got.Spec, g.Spec) {
		t.Errorf("GET Location spec %s, want %s", got.Spec, g.Spec)
	}

	a := e.lastAudit()
	if a.Action != apiv1.ActionCreate || a.Outcome != "accepted" || a.Status != http.StatusCreated ||
		a.Actor != "alice" || a.GenerationID == nil || *a.GenerationID != 1 || a.ClientRequestID != "req-create-1" ||
		!apiv1.ValidRequestID(a.RequestID) || a.RequestID == "req-create-1" || a.RemoteAddr == "" || a.Count != 1 {
		t.Errorf("audit entry = %+v", a)
	}
	if !strings.Contains(string(a.Detail), `"first"`) {
		t.Errorf("audit detail %s does not carry the message", a.Detail)
	}
}

func TestCreateGenerationYAML(t *testing.T) {
	t.Parallel()
	const body = `message: from yaml
spec:
  upstreams:
    - name: api-stable
      endpoints: ["127.0.0.1:9001"]
    - name: api-canary
      endpoints: ["127.0.0.1:9101"]
  services:
    - name: api
      base_path: /v1
      split:
        targets:
          - {upstream: api-stable, weight: 95}
          - {upstream: api-canary}
`
	for _, ct := range yamlTypes {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Options{})
			g := e.do(call{method: "POST", path: "/api/v1/generations", body: body, contentType: ct}).
				want(t, http.StatusCreated).generation(t)
			if g.Message != "from yaml" {
				t.Errorf("message = %q", g.Message)
			}
			// An absent weight is 1.
			if ws := weightsOf(t, g, "api"); !slices.Equal(ws, []int{95, 1}) {
				t.Errorf("weights = %v, want [95 1]", ws)
			}
		})
	}
}

func TestCreateDryRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(95, 5), "")
	audits := len(e.audit())

	var res apiv1.DryRunResult
	e.do(call{method: "POST", path: "/api/v1/generations?dry_run=true", body: map[string]any{"spec": specWith(90, 10)}}).
		want(t, http.StatusOK).decode(t, &res)
	if !res.Valid || res.Impact.From == nil || *res.Impact.From != 1 || res.Impact.To != nil {
		t.Errorf("dry run = %+v", res)
	}
	api := findService(t, res.Impact, "api")
	if api.Change != apiv1.ChangeModified || !near(api.MovedShare, 0.05) {
		t.Errorf("impact on api = %+v, want modified with moved_share 0.05", api)
	}
	if n := e.generationCount(); n != 1 {
		t.Errorf("%d generations stored after a dry run, want 1", n)
	}
	if n := len(e.audit()); n != audits {
		t.Errorf("a dry run wrote %d audit entries", n-audits)
	}
	// An invalid spec in a dry run is the same 422, and stores nothing either.
	bad := specWith(90, 10).Edit(func(s *config.Spec) { s.Services[0].Split.Targets[1].Upstream = "api-canry" })
	p := e.do(call{method: "POST", path: "/api/v1/generations?dry_run=true", body: map[string]any{"spec": bad}}).
		want(t, http.StatusUnprocessableEntity).problem(t)
	if !slices.Contains(paths(p), "services[0].split.targets[1].upstream") {
		t.Errorf("dry run errors = %v", p.Errors)
	}
	if n := e.generationCount(); n != 1 {
		t.Errorf("%d generations stored after an invalid dry run, want 1", n)
	}
}

func TestCreateInvalidSpecListsEveryError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	spec := map[string]any{
		"upstreams": []any{
			map[string]any{"name": "api-stable", "balancer": "fastest", "endpoints": []string{"127.0.0.1:9001"}},
			map[string]any{"name": "api-canary", "endpoints": []string{"127.0.0.1:99999"}},
		},
		"services": []any{map[string]any{
			"name": "api",
			"split": map[string]any{"targets": []any{
				map[string]any{"upstream": "api-stable", "weight": 95},
				map[string]any{"upstream": "api-canry", "weight": 5},
			}},
		}},
	}
	p := e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": spec}, violates: true}).
		want(t, http.StatusUnprocessableEntity).problem(t)
	want := []string{"upstreams[0].balancer", "upstreams[1].endpoints[0]", "services[0].split.targets[1].upstream"}
	for _, path := range want {
		if !slices.Contains(paths(p), path) {
			t.Errorf("errors %v lack path %s", p.Errors, path)
		}
	}
	if len(p.Errors) != len(want) {
		t.Errorf("got %d errors %v, want %d", len(p.Errors), p.Errors, len(want))
	}
	if p.Status != http.StatusUnprocessableEntity || p.Type == "" || p.RequestID == "" {
		t.Errorf("problem = %+v", p)
	}
	if n := e.generationCount(); n != 0 {
		t.Errorf("%d generations stored for an invalid spec", n)
	}
	e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(t, http.StatusNotFound)

	a := e.lastAudit()
	if a.Outcome != "refused" || a.Status != http.StatusUnprocessableEntity || a.GenerationID != nil {
		t.Errorf("audit entry = %+v", a)
	}
	var detail struct {
		Errors []config.FieldError `json:"errors"`
	}
	if err := json.Unmarshal(a.Detail, &detail); err != nil || len(detail.Errors) != len(want) {
		t.Errorf("audit detail %s does not list the %d errors (%v)", a.Detail, len(want), err)
	}
}

func TestCreateRefusals(t *testing.T) {
	t.Parallel()
	valid := map[string]any{"spec": specWith(95, 5)}
	tests := []struct {
		name   string
		call   call
		status int
		path   string // an expected error path, if any
	}{
		{"unknown top-level field", call{body: map[string]any{"spec": specWith(95, 5), "mesage": "typo"}}, 422, "mesage"},
		{"unknown spec field", call{body: map[string]any{"spec": map[string]any{"services": []any{}, "extra": 1}}}, 422, "extra"},
		{"missing spec", call{body: map[string]any{"message": "no spec"}}, 422, "spec"},
		{"empty body", call{body: ""}, 422, "body"},
		{"malformed JSON", call{body: `{"spec": `}, 400, ""},
		{"trailing data", call{body: `{"spec": {}} {}`}, 400, ""},
		{"malformed YAML", call{body: "spec: [unclosed", contentType: "application/yaml"}, 400, ""},
		{"message too long", call{body: map[string]any{"spec": specWith(95, 5), "message": strings.Repeat("x", 1025)}}, 422, "message"},
		{"wrong media type", call{body: `{"spec": {}}`, contentType: "text/plain"}, 415, ""},
		{"form media type", call{body: "spec=1", contentType: "application/x-www-form-urlencoded"}, 415, ""},
		{"bad If-Match", call{body: valid, header: map[string]string{"If-Match": "abc"}}, 400, "If-Match"},
		{"bad dry_run", call{path: "/api/v1/generations?dry_run=maybe", body: valid}, 400, "dry_run"},
		{"bad actor", call{body: valid, header: map[string]string{"X-Dwara-Actor": strings.Repeat("a", 65)}}, 400, "X-Dwara-Actor"},
		{"actor with control characters", call{body: valid, header: map[string]string{"X-Dwara-Actor": "a\tb"}}, 400, "X-Dwara-Actor"},
	}
	e := newEnv(t, Options{})
	// The refusals run in parallel; the checks below wait for all of them.
	t.Run("refusals", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				c := tt.call
				c.method = "POST"
				if c.path == "" {
					c.path = "/api/v1/generations"
				}
				c.violates = true
				c.header = mergeHeader(c.header, "X-Request-Id", "refusal-"+strings.ReplaceAll(tt.name, " ", "-"))
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
	if n := e.generationCount(); n != 0 {
		t.Errorf("%d generations stored by refused calls", n)
	}
	// Every refusal is in the audit log with its status.
	byID := map[string]apiv1.AuditEntry{}
	for _, a := range e.audit() {
		byID[a.ClientRequestID] = a
	}
	for _, tt := range tests {
		a, ok := byID["refusal-"+strings.ReplaceAll(tt.name, " ", "-")]
		if !ok {
			t.Errorf("%s: no audit entry", tt.name)
			continue
		}
		if a.Outcome != "refused" || a.Status != tt.status || a.Action != apiv1.ActionCreate {
			t.Errorf("%s: audit entry %+v", tt.name, a)
		}
	}
}

func mergeHeader(h map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for hk, hv := range h {
		out[hk] = hv
	}
	return out
}

func TestCreateIfMatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	canary := 0
	post := func(ifMatch string, status int) *response {
		t.Helper()
		canary++ // a different spec every time: an equal one would be unchanged
		return e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(100-canary, canary)},
			header: map[string]string{"If-Match": ifMatch}}).want(t, status)
	}
	post("*", http.StatusPreconditionFailed) // nothing yet
	post(`"0"`, http.StatusCreated)          // nothing yet: ok
	post(`"0"`, http.StatusPreconditionFailed)
	p := post(`"7"`, http.StatusPreconditionFailed).problem(t)
	if !strings.Contains(p.Detail, "active generation is 1") {
		t.Errorf("412 detail %q does not name the active generation", p.Detail)
	}
	post(`"1"`, http.StatusCreated)
	post("2", http.StatusCreated) // a bare id is accepted too
	post("*", http.StatusCreated)

	a := e.audit()
	var refused int
	for _, x := range a {
		if x.Status == http.StatusPreconditionFailed && x.Outcome == "refused" {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("%d refused 412 audit entries, want 3", refused)
	}
}

func TestCreateConcurrentIfMatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(95, 5), "")
	const n = 10
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90-i, 10+i)},
				header: map[string]string{"If-Match": `"1"`}})
			statuses[i] = r.status
		})
	}
	wg.Wait()
	var created, failed int
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created++
		case http.StatusPreconditionFailed:
			failed++
		}
	}
	if created != 1 || failed != n-1 {
		t.Errorf("statuses %v: %d created, %d precondition failed; want 1 and %d", statuses, created, failed, n-1)
	}
	if c := e.generationCount(); c != 2 {
		t.Errorf("%d generations, want 2", c)
	}
}

func TestCreateConcurrentIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	const n = 50
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(i+1, 1)}})
			if r.status == http.StatusCreated {
				ids[i] = r.generation(t).ID
			}
		})
	}
	wg.Wait()
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("ids %v, want 1..%d", ids, n)
		}
	}
	// The parent chain is consistent: each generation's parent is the one before.
	gens, err := e.store.List(t.Context(), n, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		if g.ID == 1 && g.ParentID != nil || g.ID > 1 && (g.ParentID == nil || *g.ParentID != g.ID-1) {
			t.Errorf("generation %d has parent %v", g.ID, g.ParentID)
		}
	}
}

func TestListGenerations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	var empty apiv1.GenerationList
	e.do(call{method: "GET", path: "/api/v1/generations"}).want(t, http.StatusOK).decode(t, &empty)
	if len(empty.Items) != 0 || empty.NextCursor != "" {
		t.Errorf("empty list = %+v", empty)
	}
	for i := range 7 {
		e.publish(specWith(90+i, 10), "")
	}
	var pages [][]int64
	cursor := ""
	for range 5 {
		path := "/api/v1/generations?limit=3"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := e.do(call{method: "GET", path: path}).want(t, http.StatusOK)
		if !strings.Contains(string(r.body), `"items"`) || strings.Contains(string(r.body), `"spec"`) {
			t.Errorf("list body %s: want items without specs", r.body)
		}
		var page apiv1.GenerationList
		r.decode(t, &page)
		var ids []int64
		for _, g := range page.Items {
			ids = append(ids, g.ID)
		}
		pages = append(pages, ids)
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	want := [][]int64{{7, 6, 5}, {4, 3, 2}, {1}}
	if !slices.EqualFunc(pages, want, slices.Equal) {
		t.Errorf("pages %v, want %v", pages, want)
	}
	var all apiv1.GenerationList
	e.do(call{method: "GET", path: "/api/v1/generations"}).want(t, http.StatusOK).decode(t, &all)
	if len(all.Items) != 7 || all.NextCursor != "" {
		t.Errorf("default page: %d items, next_cursor %q", len(all.Items), all.NextCursor)
	}
}

func TestListBadParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	for _, path := range []string{"/api/v1/generations", "/api/v1/audit"} {
		for _, tt := range []struct{ query, param string }{
			{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=abc", "limit"}, {"limit=", "limit"},
			{"cursor=abc", "cursor"}, {"cursor=0", "cursor"}, {"cursor=-3", "cursor"},
		} {
			t.Run(path+"?"+tt.query, func(t *testing.T) {
				t.Parallel()
				p := e.in(t).do(call{method: "GET", path: path + "?" + tt.query, violates: true}).want(t, http.StatusBadRequest).problem(t)
				if !slices.Equal(paths(p), []string{tt.param}) {
					t.Errorf("errors %v, want path %q", p.Errors, tt.param)
				}
			})
		}
	}
}

func TestGetAndCurrentGeneration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	p := e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(t, http.StatusNotFound).problem(t)
	if p.Status != http.StatusNotFound || p.Instance != "/api/v1/generations/current" {
		t.Errorf("problem = %+v", p)
	}
	g1 := e.publish(specWith(95, 5), "one")
	g2 := e.publish(specWith(90, 10), "two")

	cur := e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(t, http.StatusOK)
	if g := cur.generation(t); g.ID != g2.ID || !spectest.JSONEqual(t, g.Spec, g2.Spec) || cur.header.Get("ETag") != `"2"` {
		t.Errorf("current = %+v, ETag %q", g, cur.header.Get("ETag"))
	}
	got := e.do(call{method: "GET", path: "/api/v1/generations/1"}).want(t, http.StatusOK)
	if g := got.generation(t); g.ID != 1 || g.Message != "one" || !spectest.JSONEqual(t, g.Spec, g1.Spec) || got.header.Get("ETag") != `"1"` {
		t.Errorf("generation 1 = %+v", g)
	}
	// A client polling with the ETag it has gets 304 until something changes.
	e.do(call{method: "GET", path: "/api/v1/generations/current", header: map[string]string{"If-None-Match": `"2"`}}).
		want(t, http.StatusNotModified)
	e.do(call{method: "GET", path: "/api/v1/generations/current", header: map[string]string{"If-None-Match": `"1"`}}).
		want(t, http.StatusOK)

	e.do(call{method: "GET", path: "/api/v1/generations/99"}).want(t, http.StatusNotFound).problem(t)
	p = e.do(call{method: "GET", path: "/api/v1/generations/abc", violates: true}).want(t, http.StatusBadRequest).problem(t)
	if !slices.Equal(paths(p), []string{"id"}) {
		t.Errorf("errors %v, want path id", p.Errors)
	}
}

func TestRollback(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g1 := e.publish(specWith(95, 5), "good")
	e.publish(specWith(50, 50), "bad")

	r := e.do(call{method: "POST", path: "/api/v1/generations/1/rollback", header: map[string]string{"X-Dwara-Actor": "bob"}}).
		want(t, http.StatusCreated)
	g3 := r.generation(t)
	if g3.ID != 3 || g3.Action != apiv1.ActionRollback || g3.SourceID == nil || *g3.SourceID != 1 ||
		g3.ParentID == nil || *g3.ParentID != 2 || g3.Author != "bob" || g3.Message != "rollback to generation 1" {
		t.Errorf("rollback generation = %+v", g3)
	}
	if !spectest.JSONEqual(t, g3.Spec, g1.Spec) {
		t.Errorf("rolled back spec %s, want %s", g3.Spec, g1.Spec)
	}
	if cur := e.current(); cur.ID != 3 || !spectest.JSONEqual(t, cur.Spec, g1.Spec) {
		t.Errorf("current after rollback = %+v", cur)
	}
	g4 := e.do(call{method: "POST", path: "/api/v1/generations/2/rollback", body: map[string]any{"message": "again"}}).
		want(t, http.StatusCreated).generation(t)
	if g4.Message != "again" || *g4.SourceID != 2 {
		t.Errorf("rollback with a message = %+v", g4)
	}

	e.do(call{method: "POST", path: "/api/v1/generations/99/rollback"}).want(t, http.StatusNotFound).problem(t)
	e.do(call{method: "POST", path: "/api/v1/generations/1/rollback", header: map[string]string{"If-Match": `"3"`}}).
		want(t, http.StatusPreconditionFailed).problem(t)
	e.do(call{method: "POST", path: "/api/v1/generations/1/rollback", body: map[string]any{"msg": "x"}, violates: true}).
		want(t, http.StatusUnprocessableEntity).problem(t)
	if a := e.lastAudit(); a.Action != apiv1.ActionRollback || a.Status != http.StatusUnprocessableEntity || a.Outcome != "refused" {
		t.Errorf("audit entry = %+v", a)
	}
	if n := e.generationCount(); n != 4 {
		t.Errorf("%d generations, want 4", n)
	}
}

// TestPublishAnswersWithTheStoredSpec: every call that creates a
// generation answers with the spec bytes it stored, which are byte for
// byte what a GET of the generation answers (the stored jsonb in the
// schema's order), for a new generation and an unchanged one alike.
func TestPublishAnswersWithTheStoredSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	steps := []struct {
		name string
		call call
		want int
	}{
		{"create", call{method: "POST", path: "/api/v1/generations", body: map[string]any{"message": "m", "spec": specWith(95, 5)}}, http.StatusCreated},
		{"create unchanged", call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5)}}, http.StatusOK},
		{"flip", call{method: "POST", path: "/api/v1/services/api/flip", body: map[string]any{}}, http.StatusCreated},
		{"weights", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-stable": 60, "api-canary": 40}}}, http.StatusCreated},
		{"kill", call{method: "POST", path: "/api/v1/services/api/kill", body: map[string]any{}}, http.StatusCreated},
		{"rollback", call{method: "POST", path: "/api/v1/generations/1/rollback", body: map[string]any{}}, http.StatusCreated},
		{"stable", call{method: "POST", path: "/api/v1/generations", body: stableBody("s", "blue", 70, "green", 30)}, http.StatusCreated},
		{"stable unchanged", call{method: "POST", path: "/api/v1/generations", body: stableBody("s", "blue", 70, "green", 30)}, http.StatusOK},
	}
	for _, st := range steps {
		g := e.do(st.call).want(t, st.want).generation(t)
		got := e.do(call{method: "GET", path: fmt.Sprintf("/api/v1/generations/%d", g.ID)}).want(t, http.StatusOK).generation(t)
		if !bytes.Equal(g.Spec, got.Spec) {
			t.Errorf("%s: answered spec\n%s\nGET answers\n%s", st.name, g.Spec, got.Spec)
		}
		stored, err := e.store.Get(t.Context(), g.ID)
		if err != nil || !spectest.JSONEqual(t, stored.Spec, g.Spec) {
			t.Errorf("%s: stored spec %s, %v; answered %s", st.name, stored.Spec, err, g.Spec)
		}
	}
}
