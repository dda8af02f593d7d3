package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
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
	store, _ := dbtest.NewStore(t)
	return newEnvOn(t, store, o)
}

// newEnvOn is newEnv on store, which the caller closes.
func newEnvOn(t *testing.T, store *db.Store, o Options) *env {
	t.Helper()
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
	// contentType defaults to application/json when there is a body, and
	// for a mutating method (the API refuses one without a JSON or YAML
	// type, even with an empty body) unless noContentType is set.
	contentType   string
	noContentType bool
	// header is sent as given; "Host" sets the request's Host.
	header map[string]string
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
	if c.contentType == "" && !c.noContentType && (c.method == "POST" || c.method == "PUT") {
		c.contentType = contentJSON
	}
	req, err := http.NewRequestWithContext(e.t.Context(), c.method, e.url+c.path, body)
	if err != nil {
		e.t.Fatalf("new request: %v", err)
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v
			continue
		}
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
func (r *response) problem(t *testing.T) apiv1.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != contentProblem {
		t.Fatalf("Content-Type %q, want %s; body: %s", ct, contentProblem, r.body)
	}
	var p apiv1.Problem
	r.decode(t, &p)
	return p
}

// paths returns the error paths of a problem.
func paths(p apiv1.Problem) []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Path)
	}
	return out
}

// generation decodes a generation body.
func (r *response) generation(t *testing.T) apiv1.Generation {
	t.Helper()
	var g apiv1.Generation
	r.decode(t, &g)
	return g
}

// publish creates a generation from spec (any JSON-encodable value) and
// returns it.
func (e *env) publish(spec any, message string) apiv1.Generation {
	e.t.Helper()
	return e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"message": message, "spec": spec}}).
		want(e.t, http.StatusCreated).generation(e.t)
}

// audit returns the newest audit entries (up to 500).
func (e *env) audit() []apiv1.AuditEntry {
	e.t.Helper()
	var page apiv1.AuditList
	e.do(call{method: "GET", path: "/api/v1/audit?limit=500"}).want(e.t, http.StatusOK).decode(e.t, &page)
	return page.Items
}

// lastAudit returns the newest audit entry.
func (e *env) lastAudit() apiv1.AuditEntry {
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

// specWith returns the standard test spec: spectest.Canary (service "api"
// split api-stable/api-canary by the given weights), upstream api-next,
// service "web" on api-stable alone, and service "tri" split over all three.
func specWith(stable, canary int) *spectest.Builder {
	return spectest.Canary(stable, canary).
		Upstream("api-next", "127.0.0.1:9201").
		Route("web", "/", "api-stable").
		Split("tri", "/tri", spectest.T("api-stable", 1), spectest.T("api-canary", 1), spectest.T("api-next", 1))
}

// weightsOf returns the split weights of service name in g's spec.
func weightsOf(t *testing.T, g apiv1.Generation, name string) []int {
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
func (e *env) current() apiv1.Generation {
	e.t.Helper()
	return e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(e.t, http.StatusOK).generation(e.t)
}
