package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
)

// env is one API under test: a Server on a fresh database, served by an
// httptest server on 127.0.0.1, and a client whose every call is checked
// against openapi.yaml.
type env struct {
	t      *testing.T
	srv    *Server
	store  *db.Store
	url    string
	client *http.Client
}

// newEnv starts a Server with o (Store and Logger filled in when unset).
func newEnv(t *testing.T, o Options) *env {
	t.Helper()
	dbURL := dbtest.New(t)
	store, err := db.Open(t.Context(), dbURL)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(store.Close)
	o.Store = store
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	srv := New(o)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	router, err := specRouter()
	if err != nil {
		t.Fatal(err)
	}
	return &env{
		t:     t,
		srv:   srv,
		store: store,
		url:   ts.URL,
		client: &http.Client{
			Transport: &conformance{t: t, router: router, next: ts.Client().Transport},
			Timeout:   30 * time.Second,
		},
	}
}

// in returns a copy of e that reports to t (a subtest).
func (e *env) in(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// call is one request.
type call struct {
	method, path string
	// body is sent as is when it is a string or []byte, else as JSON.
	body any
	// contentType defaults to application/json when there is a body.
	contentType string
	header      map[string]string
	// violates marks a request that deliberately breaks openapi.yaml.
	violates bool
}

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends c and reads the answer; transport errors fail the test.
func (e *env) do(c call) *response {
	e.t.Helper()
	var body io.Reader
	if c.body != nil {
		switch b := c.body.(type) {
		case string:
			body = strings.NewReader(b)
		case []byte:
			body = bytes.NewReader(b)
		default:
			js, err := json.Marshal(b)
			if err != nil {
				e.t.Fatalf("encode body: %v", err)
			}
			body = bytes.NewReader(js)
		}
		if c.contentType == "" {
			c.contentType = contentJSON
		}
	}
	req, err := http.NewRequestWithContext(e.t.Context(), c.method, e.url+c.path, body)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	if c.violates {
		req = mayViolate(req)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", c.method, c.path, err)
	}
	return &response{status: resp.StatusCode, header: resp.Header, body: data}
}

// want fails the test unless the status is code.
func (r *response) want(t *testing.T, code int) *response {
	t.Helper()
	if r.status != code {
		t.Fatalf("status %d, want %d; body: %s", r.status, code, r.body)
	}
	return r
}

// decode decodes the JSON body into v.
func (r *response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// problem decodes a problem+json body.
func (r *response) problem(t *testing.T) Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != contentProblem {
		t.Fatalf("Content-Type %q, want %s; body: %s", ct, contentProblem, r.body)
	}
	var p Problem
	r.decode(t, &p)
	return p
}

// paths returns the error paths of a problem.
func (p Problem) paths() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Path)
	}
	return out
}

// generation decodes a generation body.
func (r *response) generation(t *testing.T) db.Generation {
	t.Helper()
	var g db.Generation
	r.decode(t, &g)
	return g
}

// publish creates a generation from spec (any JSON-encodable value) and
// returns it.
func (e *env) publish(spec any, message string) db.Generation {
	e.t.Helper()
	return e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"message": message, "spec": spec}}).
		want(e.t, http.StatusCreated).generation(e.t)
}

// audit returns the newest audit entries (up to 500).
func (e *env) audit() []db.AuditEntry {
	e.t.Helper()
	var page AuditList
	e.do(call{method: "GET", path: "/api/v1/audit?limit=500"}).want(e.t, http.StatusOK).decode(e.t, &page)
	return page.Items
}

// lastAudit returns the newest audit entry.
func (e *env) lastAudit() db.AuditEntry {
	e.t.Helper()
	entries := e.audit()
	if len(entries) == 0 {
		e.t.Fatal("the audit log is empty")
	}
	return entries[0]
}

// generationCount returns the number of stored generations.
func (e *env) generationCount() int {
	e.t.Helper()
	gens, err := e.store.List(context.Background(), 1000, 0)
	if err != nil {
		e.t.Fatalf("list generations: %v", err)
	}
	return len(gens)
}

// jsonEqual reports whether two JSON documents are semantically equal.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("decode %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// specWith returns the standard test spec: upstreams api-stable, api-canary
// and api-next, service "api" split over the first two with the given
// weights, service "web" on api-stable alone, and service "tri" split over
// all three.
func specWith(stable, canary int) map[string]any {
	return map[string]any{
		"upstreams": []any{
			map[string]any{"name": "api-stable", "endpoints": []string{"127.0.0.1:9001", "127.0.0.1:9002"}},
			map[string]any{"name": "api-canary", "endpoints": []string{"127.0.0.1:9101"}},
			map[string]any{"name": "api-next", "endpoints": []string{"127.0.0.1:9201"}},
		},
		"services": []any{
			map[string]any{
				"name":      "api",
				"base_path": "/v1",
				"split": map[string]any{"targets": []any{
					map[string]any{"upstream": "api-stable", "weight": stable},
					map[string]any{"upstream": "api-canary", "weight": canary},
				}},
			},
			map[string]any{"name": "web", "base_path": "/", "upstream": "api-stable"},
			map[string]any{
				"name":      "tri",
				"base_path": "/tri",
				"split": map[string]any{"targets": []any{
					map[string]any{"upstream": "api-stable", "weight": 1},
					map[string]any{"upstream": "api-canary", "weight": 1},
					map[string]any{"upstream": "api-next", "weight": 1},
				}},
			},
		},
	}
}

// weightsOf returns the split weights of service name in g's spec.
func weightsOf(t *testing.T, g db.Generation, name string) []int {
	t.Helper()
	spec, err := decodeSpec(g)
	if err != nil {
		t.Fatal(err)
	}
	svc, _ := spec.Service(name)
	if svc == nil || svc.Split == nil {
		t.Fatalf("generation %d: service %q has no split", g.ID, name)
	}
	var ws []int
	for _, tg := range svc.Split.Targets {
		ws = append(ws, tg.Weight)
	}
	return ws
}

// current returns the active generation.
func (e *env) current() db.Generation {
	e.t.Helper()
	return e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(e.t, http.StatusOK).generation(e.t)
}
