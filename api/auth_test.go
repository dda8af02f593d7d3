package api

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testlog"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := newEnv(t, Options{Token: token})
	tests := []struct {
		name   string
		auth   string
		path   string
		status int
	}{
		{"no header", "", "/api/v1/generations", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", "/api/v1/generations", http.StatusUnauthorized},
		{"token prefix", "Bearer s3cret", "/api/v1/generations", http.StatusUnauthorized},
		{"wrong scheme", "Basic " + token, "/api/v1/generations", http.StatusUnauthorized},
		{"right token", "Bearer " + token, "/api/v1/generations", http.StatusOK},
		{"scheme is case-insensitive", "bearer " + token, "/api/v1/generations", http.StatusOK},
		{"audit needs the token", "", "/api/v1/audit", http.StatusUnauthorized},
		{"gateways need the token", "", "/api/v1/gateways", http.StatusUnauthorized},
		{"events need the token", "", "/api/v1/events", http.StatusUnauthorized},
		{"healthz is open", "", "/healthz", http.StatusOK},
		{"readyz is open", "", "/readyz", http.StatusOK},
		{"openapi.yaml is open", "", "/openapi.yaml", http.StatusOK},
		{"docs are open", "", "/docs", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := map[string]string{}
			if tt.auth != "" {
				h["Authorization"] = tt.auth
			}
			r := e.in(t).do(call{method: "GET", path: tt.path, header: h}).want(t, tt.status)
			if tt.status == http.StatusUnauthorized {
				if p := r.problem(t); p.Status != 401 {
					t.Errorf("problem = %+v", p)
				}
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
				}
			}
		})
	}
}

func TestAuthRefusalsAreAudited(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := newEnv(t, Options{Token: token})
	bearer := map[string]string{"Authorization": "Bearer " + token}

	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5)},
		header: map[string]string{"Authorization": "Bearer wrong", "X-Dwara-Actor": "mallory", "X-Request-Id": "bad-token"}}).
		want(t, http.StatusUnauthorized)
	e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: map[string]string{"X-Request-Id": "no-token"}}).
		want(t, http.StatusUnauthorized)
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5)},
		header: mergeHeader(mergeHeader(bearer, "X-Dwara-Actor", "alice"), "X-Request-Id", "good-token")}).want(t, http.StatusCreated)

	var page apiv1.AuditList
	e.do(call{method: "GET", path: "/api/v1/audit", header: bearer}).want(t, http.StatusOK).decode(t, &page)
	if len(page.Items) != 3 {
		t.Fatalf("%d audit entries, want 3: %+v", len(page.Items), page.Items)
	}
	ok, flip, bad := page.Items[0], page.Items[1], page.Items[2]
	// An unauthenticated caller cannot choose what the audit log says:
	// its X-Request-Id is stored nowhere, and every request_id is the
	// server's own.
	if bad.Actor != "unauthenticated" || bad.Outcome != "refused" ||
		bad.Status != http.StatusUnauthorized || bad.Action != apiv1.ActionCreate || bad.RemoteAddr == "" ||
		bad.ClientRequestID != "" || bad.RequestID == "bad-token" || !apiv1.ValidRequestID(bad.RequestID) {
		t.Errorf("wrong-token entry = %+v", bad)
	}
	if flip.Action != apiv1.ActionFlip || flip.Status != http.StatusUnauthorized || flip.ClientRequestID != "" || flip.RequestID == "no-token" {
		t.Errorf("no-token entry = %+v", flip)
	}
	if ok.Actor != "alice" || ok.Outcome != "accepted" || ok.Status != http.StatusCreated ||
		ok.ClientRequestID != "good-token" || ok.RequestID == "good-token" || !apiv1.ValidRequestID(ok.RequestID) {
		t.Errorf("accepted entry = %+v", ok)
	}
	if e.generationCount() != 1 {
		t.Errorf("refused calls stored generations")
	}
}

func TestBodyLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	big := `{"message": "` + strings.Repeat("x", apiv1.MaxBodyBytes) + `", "spec": {}}`
	p := e.do(call{method: "POST", path: "/api/v1/generations", body: big, violates: true,
		header: map[string]string{"X-Request-Id": "too-large"}}).want(t, http.StatusRequestEntityTooLarge).problem(t)
	if p.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("problem = %+v", p)
	}
	e.do(call{method: "PUT", path: "/api/v1/services/api/weights", body: big, violates: true}).
		want(t, http.StatusRequestEntityTooLarge)

	a := e.audit()
	if len(a) != 2 || a[1].ClientRequestID != "too-large" || a[1].Status != http.StatusRequestEntityTooLarge || a[1].Outcome != "refused" ||
		a[0].Action != apiv1.ActionWeights || a[0].Status != http.StatusRequestEntityTooLarge {
		t.Errorf("audit = %+v", a)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	tests := []struct {
		name, sent string
		kept       bool
	}{
		{"well-formed", "abc.DEF_123:x-y", true},
		{"longest", strings.Repeat("a", 128), true},
		{"too long", strings.Repeat("a", 129), false},
		{"bad character", "abc/def", false},
		{"space", "abc def", false},
		{"absent", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := map[string]string{}
			if tt.sent != "" {
				h["X-Request-Id"] = tt.sent
			}
			r := e.in(t).do(call{method: "GET", path: "/healthz", header: h}).want(t, http.StatusOK)
			got := r.header.Get("X-Request-Id")
			if tt.kept && got != tt.sent || !tt.kept && (got == tt.sent || !apiv1.ValidRequestID(got)) {
				t.Errorf("sent %q, got %q", tt.sent, got)
			}
		})
	}
}

func TestHealthAndOperations(t *testing.T) {
	t.Parallel()
	var ready struct {
		sync.Mutex
		ok bool
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte("dwara_generation_active 1\n"))
	})
	e := newEnv(t, Options{Metrics: metrics, Ready: func() bool { ready.Lock(); defer ready.Unlock(); return ready.ok }})

	var h health
	e.do(call{method: "GET", path: "/healthz"}).want(t, http.StatusOK).decode(t, &h)
	if h.Status != "ok" {
		t.Errorf("healthz = %+v", h)
	}
	p := e.do(call{method: "GET", path: "/readyz"}).want(t, http.StatusServiceUnavailable).problem(t)
	if !strings.Contains(p.Detail, "generation") {
		t.Errorf("readyz problem = %+v", p)
	}
	ready.Lock()
	ready.ok = true
	ready.Unlock()
	e.do(call{method: "GET", path: "/readyz"}).want(t, http.StatusOK)

	if r := e.do(call{method: "GET", path: "/metrics"}).want(t, http.StatusOK); !strings.Contains(string(r.body), "dwara_generation_active") {
		t.Errorf("metrics body %q", r.body)
	}
	if r := e.do(call{method: "GET", path: "/openapi.yaml"}).want(t, http.StatusOK); !bytes.HasPrefix(r.body, []byte("openapi: 3.0.3")) ||
		r.header.Get("Content-Type") != "application/yaml" {
		t.Errorf("openapi.yaml: %s %.40q", r.header.Get("Content-Type"), r.body)
	}
	for _, path := range []string{"/docs", "/docs/"} {
		r := e.do(call{method: "GET", path: path}).want(t, http.StatusOK)
		if !strings.Contains(string(r.body), "/openapi.yaml") || !strings.Contains(string(r.body), "/docs/swagger-ui-bundle.js") {
			t.Errorf("%s does not load the spec and the embedded bundle: %.300s", path, r.body)
		}
	}
	if r := e.do(call{method: "GET", path: "/docs/swagger-ui-bundle.js"}).want(t, http.StatusOK); len(r.body) < 100_000 {
		t.Errorf("swagger-ui-bundle.js is %d bytes", len(r.body))
	}
	e.do(call{method: "GET", path: "/docs/no-such-asset.js"}).want(t, http.StatusNotFound)
}

func TestMetricsDisabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.do(call{method: "GET", path: "/metrics"}).want(t, http.StatusNotFound).problem(t)
}

// A 5xx names the request id and nothing of its cause; the log has both.
func TestInternalErrorsDoNotLeak(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	e := newEnv(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	e.publish(specWith(95, 5), "")
	e.store.Close() // every query now fails

	for _, c := range []call{
		{method: "GET", path: "/api/v1/generations"},
		{method: "GET", path: "/api/v1/generations/current"},
		{method: "POST", path: "/api/v1/services/api/flip"},
	} {
		c.header = map[string]string{"X-Request-Id": "boom-" + strings.ReplaceAll(c.path[8:], "/", "-")}
		r := e.do(c).want(t, http.StatusInternalServerError)
		p := r.problem(t)
		if strings.Contains(string(r.body), "closed") || strings.Contains(string(r.body), "pool") ||
			!apiv1.ValidRequestID(p.RequestID) || !strings.Contains(p.Detail, p.RequestID) {
			t.Errorf("500 body leaks or lacks the request id: %s", r.body)
		}
		if r.header.Get("X-Request-Id") != c.header["X-Request-Id"] {
			t.Errorf("X-Request-Id %q, want the client's echoed", r.header.Get("X-Request-Id"))
		}
		if !strings.Contains(logs.String(), "request_id="+p.RequestID) || !strings.Contains(logs.String(), "client_request_id="+c.header["X-Request-Id"]) ||
			!strings.Contains(logs.String(), "closed") {
			t.Errorf("the log lacks the request ids or the cause: %s", logs.String())
		}
	}
	e.do(call{method: "GET", path: "/readyz"}).want(t, http.StatusServiceUnavailable)
}

// An audit entry that cannot be written is logged; the publish it records
// still succeeds.
func TestAuditFailureDoesNotFailPublish(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	e := newEnv(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	dbtest.Exec(t, e.store.ConnString(), `ALTER TABLE audit_log RENAME TO audit_log_gone`)
	g := e.publish(specWith(95, 5), "")
	if g.ID != 1 {
		t.Errorf("generation = %+v", g)
	}
	if !strings.Contains(logs.String(), "record audit entry") {
		t.Errorf("the failed audit write is not logged: %s", logs.String())
	}
}
