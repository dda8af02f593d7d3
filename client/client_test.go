package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dwara/dwara/api/apitest"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
)

// newAPI serves a real API (token "" means none) over a fresh database on
// 127.0.0.1 and returns its URL and store.
func newAPI(t *testing.T, token string) (string, *db.Store) {
	t.Helper()
	return apitest.Start(t, token)
}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return c
}

// weights returns the split weights of service "api" in g.
func weights(t *testing.T, g apiv1.Generation) []int {
	t.Helper()
	var s struct {
		Services []struct {
			Name  string `json:"name"`
			Split struct {
				Targets []struct {
					Weight int `json:"weight"`
				} `json:"targets"`
			} `json:"split"`
		} `json:"services"`
	}
	if err := json.Unmarshal(g.Spec, &s); err != nil {
		t.Fatalf("decode spec of generation %d: %v", g.ID, err)
	}
	var ws []int
	for _, tg := range s.Services[0].Split.Targets {
		ws = append(ws, tg.Weight)
	}
	return ws
}

func ptr(v int64) *int64 { return &v }

// problem returns err as an *apiv1.Problem, failing the test when it is not
// one with the status.
func problem(t *testing.T, err error, status int) *apiv1.Problem {
	t.Helper()
	p, ok := errors.AsType[*apiv1.Problem](err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *apiv1.Problem", err, err)
	}
	if p.Status != status {
		t.Fatalf("problem status %d, want %d: %v", p.Status, status, p)
	}
	return p
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: DefaultURL},
		{in: "127.0.0.1:9090", want: "http://127.0.0.1:9090"},
		{in: "https://dwara.example/admin/", want: "https://dwara.example/admin"},
		{in: " http://127.0.0.1:9090/ ", want: "http://127.0.0.1:9090"},
		{in: "ftp://127.0.0.1", bad: true},
		{in: "http://", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			u, err := ParseURL(tt.in)
			if tt.bad {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %v, want an error", tt.in, u)
				}
				return
			}
			if err != nil || u.String() != tt.want {
				t.Fatalf("ParseURL(%q) = %v, %v; want %s", tt.in, u, err, tt.want)
			}
		})
	}
}

// TestClient walks every call against one API: publish, dry run, the
// service edits, rollback, reads, pagination and diff.
func TestClient(t *testing.T) {
	t.Parallel()
	url, store := newAPI(t, "")
	var answers []int
	c := newClient(t, Options{URL: url, Actor: "alice", Answer: func(status int, body []byte) {
		answers = append(answers, status)
		if !json.Valid(body) {
			t.Errorf("answer %d is not JSON: %s", status, body)
		}
	}})
	ctx := t.Context()

	// No generation yet.
	_, err := c.Current(ctx)
	problem(t, err, http.StatusNotFound)

	res, err := c.Create(ctx, "start", spectest.Canary(95, 5).JSON(), CreateOptions{IfMatch: ptr(0)})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	g1 := res.Generation
	if res.DryRun != nil || g1 == nil || g1.ID != 1 || g1.Action != apiv1.ActionCreate || g1.Author != "alice" || g1.Message != "start" {
		t.Fatalf("Create = %+v", res)
	}

	// A dry run reports the impact and stores nothing.
	res, err = c.Create(ctx, "", spectest.Canary(90, 10).JSON(), CreateOptions{DryRun: true})
	if err != nil {
		t.Fatalf("Create dry run: %v", err)
	}
	if res.Generation != nil || res.DryRun == nil || !res.DryRun.Valid {
		t.Fatalf("dry run = %+v", res)
	}
	imp := res.DryRun.Impact
	if imp.From == nil || *imp.From != 1 || imp.To != nil || len(imp.Services) != 1 || imp.Services[0].MovedShare != 0.05 {
		t.Errorf("dry run impact = %+v", imp)
	}
	if cur, err := store.Current(ctx); err != nil || cur.ID != 1 {
		t.Fatalf("after the dry run the active generation is %d, %v; want 1", cur.ID, err)
	}

	// A stale If-Match is a 412 and stores nothing.
	_, err = c.Create(ctx, "", spectest.Canary(90, 10).JSON(), CreateOptions{IfMatch: ptr(7)})
	problem(t, err, http.StatusPreconditionFailed)

	edits := []struct {
		name   string
		call   func() (apiv1.Generation, error)
		action string
		want   []int
	}{
		{"weights", func() (apiv1.Generation, error) {
			return c.SetWeights(ctx, "api", map[string]int{"api-stable": 90, "api-canary": 10}, false, EditOptions{Message: "ramp"})
		}, apiv1.ActionWeights, []int{90, 10}},
		{"flip", func() (apiv1.Generation, error) { return c.Flip(ctx, "api", EditOptions{IfMatch: ptr(2)}) }, apiv1.ActionFlip, []int{10, 90}},
		{"kill", func() (apiv1.Generation, error) { return c.Kill(ctx, "api", EditOptions{}) }, apiv1.ActionKill, []int{100, 0}},
		{"reshuffle", func() (apiv1.Generation, error) {
			return c.SetWeights(ctx, "api", map[string]int{"api-canary": 20}, true, EditOptions{})
		}, apiv1.ActionWeights, []int{100, 20}},
		{"rollback", func() (apiv1.Generation, error) { return c.Rollback(ctx, 1, EditOptions{Message: "back"}) }, apiv1.ActionRollback, []int{95, 5}},
	}
	for i, e := range edits {
		g, err := e.call()
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		if want := int64(i + 2); g.ID != want || g.Action != e.action || g.Author != "alice" {
			t.Errorf("%s created %+v, want generation %d (%s) by alice", e.name, g, want, e.action)
		}
		got, err := c.Get(ctx, g.ID)
		if err != nil {
			t.Fatalf("Get(%d): %v", g.ID, err)
		}
		if ws := weights(t, got); !slices.Equal(ws, e.want) {
			t.Errorf("%s: weights %v, want %v", e.name, ws, e.want)
		}
	}
	cur, err := c.Current(ctx)
	if err != nil || cur.ID != 6 || cur.SourceID == nil || *cur.SourceID != 1 || cur.Message != "back" {
		t.Fatalf("Current = %+v, %v", cur, err)
	}

	// Pages of 4: 6..3, then 2..1.
	page, err := c.List(ctx, 4, "")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if ids := idsOf(page.Items); !slices.Equal(ids, []int64{6, 5, 4, 3}) || page.NextCursor == "" || page.Items[0].Spec != nil {
		t.Fatalf("first page = %v, next %q", ids, page.NextCursor)
	}
	page, err = c.List(ctx, 4, page.NextCursor)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if ids := idsOf(page.Items); !slices.Equal(ids, []int64{2, 1}) || page.NextCursor != "" {
		t.Fatalf("second page = %v, next %q", ids, page.NextCursor)
	}

	// Generation 2 (90/10) against its parent (95/5) moves 5% of keys;
	// against generation 3 (10/90) it moves 80%.
	d, err := c.Diff(ctx, 2, 0)
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if *d.From != 1 || *d.To != 2 || d.Services[0].Change != apiv1.ChangeModified || d.Services[0].MovedShare != 0.05 {
		t.Errorf("Diff(2) = %+v", d)
	}
	if d, err = c.Diff(ctx, 2, 3); err != nil || *d.From != 3 || d.Services[0].MovedShare != 0.8 {
		t.Errorf("Diff(2, against 3) = %+v, %v", d, err)
	}

	// Refusals come back as problems with every field error.
	_, err = c.Flip(ctx, "nope", EditOptions{})
	problem(t, err, http.StatusNotFound)
	_, err = c.SetWeights(ctx, "api", map[string]int{"api-canary": 30}, false, EditOptions{})
	if p := problem(t, err, http.StatusUnprocessableEntity); len(p.Errors) != 1 || p.Errors[0].Path != "weights" {
		t.Errorf("reshuffle refusal errors = %+v", p.Errors)
	}
	_, err = c.Get(ctx, 99)
	problem(t, err, http.StatusNotFound)

	if len(answers) == 0 || answers[0] != http.StatusNotFound {
		t.Errorf("Answer saw statuses %v", answers)
	}
}

// TestCanary walks the canary calls against one API, with the controller's
// actions recorded as the runner records them.
func TestCanary(t *testing.T) {
	t.Parallel()
	url, store := newAPI(t, "")
	c := newClient(t, Options{URL: url, Actor: "alice"})
	ctx := t.Context()

	list, err := c.Canary(ctx)
	if err != nil || list.Items == nil || len(list.Items) != 0 {
		t.Fatalf("Canary before any generation = %+v, %v; want an empty list", list, err)
	}
	spec := spectest.Canary(95, 5).Analysis(config.CanaryAnalysis{Enabled: true, WindowSeconds: 30, Step: 5, MinRequests: 10,
		Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05}})
	if _, err := c.Create(ctx, "", spec.JSON(), CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lock, err := store.TryCanaryLock(ctx)
	if err != nil || lock == nil {
		t.Fatalf("TryCanaryLock = %v, %v", lock, err)
	}
	t.Cleanup(func() { lock.Close(context.Background()) })
	var ids []int64
	for _, from := range []int{5, 10} {
		e, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: 1, Service: "api", FromWeight: from, ToWeight: from + 5,
			Action: apiv1.CanaryPromote, Reason: "healthy"}, 5)
		if err != nil || !ok {
			t.Fatalf("Record = %v, %v", ok, err)
		}
		ids = append(ids, e.ID)
	}

	list, err = c.Canary(ctx)
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("Canary = %+v, %v", list, err)
	}
	if g := list.Items[0]; g.Service != "api" || g.Configured != [2]int{95, 5} || g.Weights != [2]int{85, 15} ||
		!g.Transient || g.State != apiv1.CanaryRunning || g.WindowSeconds != 30 || g.LastEvent == nil || g.LastEvent.ID != ids[1] {
		t.Errorf("group = %+v", g)
	}

	page, err := c.CanaryEvents(ctx, "api", 1, 1, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != ids[1] || page.NextCursor == "" {
		t.Fatalf("first page = %+v, %v", page, err)
	}
	page, err = c.CanaryEvents(ctx, "api", 1, 1, page.NextCursor)
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != ids[0] || page.NextCursor != "" {
		t.Fatalf("second page = %+v, %v", page, err)
	}
	if page, err := c.CanaryEvents(ctx, "web", 0, 0, ""); err != nil || len(page.Items) != 0 {
		t.Errorf("events of web = %+v, %v", page, err)
	}
	_, err = c.CanaryEvents(ctx, "", 0, 501, "")
	if p := problem(t, err, http.StatusBadRequest); len(p.Errors) != 1 || p.Errors[0].Path != "limit" {
		t.Errorf("limit 501: %+v", p)
	}

	g, err := c.PauseCanary(ctx, "api", "looking")
	if err != nil || g.State != apiv1.CanaryPaused || g.LastEvent == nil || g.LastEvent.Reason != "looking" || g.LastEvent.Actor != "alice" {
		t.Errorf("PauseCanary = %+v, %v", g, err)
	}
	if g, err := c.PauseCanary(ctx, "api", ""); err != nil || g.State != apiv1.CanaryPaused {
		t.Errorf("second PauseCanary = %+v, %v", g, err)
	}
	if g, err := c.ResumeCanary(ctx, "api", ""); err != nil || g.State != apiv1.CanaryRunning || g.LastEvent.Action != apiv1.CanaryResume {
		t.Errorf("ResumeCanary = %+v, %v", g, err)
	}
	_, err = c.PauseCanary(ctx, "nope", "")
	problem(t, err, http.StatusNotFound)

	_, err = c.Adopt(ctx, "api", EditOptions{IfMatch: ptr(7)})
	problem(t, err, http.StatusPreconditionFailed)
	adopted, err := c.Adopt(ctx, "api", EditOptions{IfMatch: ptr(1)})
	if err != nil || adopted.ID != 2 || adopted.Action != apiv1.ActionAdopt || adopted.Author != "alice" ||
		adopted.Message != "adopt canary weights 85/15 of api" || !slices.Equal(weights(t, adopted), []int{85, 15}) {
		t.Fatalf("Adopt = %+v, %v", adopted, err)
	}
	_, err = c.Adopt(ctx, "api", EditOptions{Message: "again"})
	if p := problem(t, err, http.StatusConflict); !strings.Contains(p.Detail, "no transient weights to adopt") {
		t.Errorf("second Adopt: %+v", p)
	}
}

func idsOf(gs []apiv1.Generation) []int64 {
	var ids []int64
	for _, g := range gs {
		ids = append(ids, g.ID)
	}
	return ids
}

func TestCreateInvalidSpec(t *testing.T) {
	t.Parallel()
	url, store := newAPI(t, "")
	c := newClient(t, Options{URL: url})
	bad := json.RawMessage(`{
	  "upstreams": [{"name": "api-stable", "endpoints": []}],
	  "services": [{"name": "api", "base_path": "v1", "split": {"targets": [
	    {"upstream": "api-stable", "weight": 95}, {"upstream": "api-canry", "weight": 5}]}}]}`)
	_, err := c.Create(t.Context(), "", bad, CreateOptions{})
	p := problem(t, err, http.StatusUnprocessableEntity)
	var paths []string
	for _, e := range p.Errors {
		paths = append(paths, e.Path)
	}
	for _, want := range []string{"upstreams[0].endpoints", "services[0].base_path", "services[0].split.targets[1].upstream"} {
		if !slices.Contains(paths, want) {
			t.Errorf("errors %v lack %s", paths, want)
		}
	}
	if !strings.Contains(p.Error(), "services[0].split.targets[1].upstream: ") {
		t.Errorf("Error() = %q lacks the field errors", p.Error())
	}
	if gens, err := store.List(t.Context(), 10, 0); err != nil || len(gens) != 0 {
		t.Errorf("stored %d generations (%v); want none", len(gens), err)
	}

	if _, err := c.Create(t.Context(), "", json.RawMessage(`{"services": [`), CreateOptions{}); err == nil {
		t.Error("Create with broken JSON succeeded")
	}
}

func TestToken(t *testing.T) {
	t.Parallel()
	url, _ := newAPI(t, "s3cret")
	tests := []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"wrong token", "guess", http.StatusUnauthorized},
		{"right token", "s3cret", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, Options{URL: url, Token: tt.token})
			_, err := c.List(t.Context(), 0, "")
			if tt.status == http.StatusOK {
				if err != nil {
					t.Fatalf("List: %v", err)
				}
				return
			}
			if p := problem(t, err, tt.status); p.Title != "Unauthorized" {
				t.Errorf("problem = %+v", p)
			}
		})
	}
}

// TestNotDwara checks that an error answer from something other than the API
// still comes back as a problem with the status.
func TestNotDwara(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
	}))
	t.Cleanup(ts.Close)
	_, err := newClient(t, Options{URL: ts.URL}).Current(t.Context())
	if p := problem(t, err, http.StatusBadGateway); !strings.Contains(p.Detail, "bad gateway") {
		t.Errorf("problem = %+v", p)
	}
}

func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	addr := testnet.ClosedAddr(t)
	_, err := newClient(t, Options{URL: addr}).List(t.Context(), 0, "")
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "http://"+addr+"/api/v1/generations") {
		t.Fatalf("List against a closed port: %v; want connection refused naming the URL", err)
	}
}
