package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// The read token reads and never changes anything: a mutating call with it
// is a 403, audited with the actor "read-token".
func TestReadToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{Token: "admin-secret", ReadToken: "read-secret"})
	admin := map[string]string{"Authorization": "Bearer admin-secret"}
	reader := map[string]string{"Authorization": "Bearer read-secret", "X-Dwara-Actor": "mallory"}
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}, header: admin}).
		want(t, http.StatusCreated)

	for _, path := range []string{"/api/v1/generations", "/api/v1/generations/current", "/api/v1/audit", "/api/v1/gateways", "/api/v1/canary"} {
		e.do(call{method: "GET", path: path, header: reader}).want(t, http.StatusOK)
		e.do(call{method: "GET", path: path}).want(t, http.StatusUnauthorized)
		e.do(call{method: "GET", path: path, header: map[string]string{"Authorization": "Bearer read-secretX"}}).want(t, http.StatusUnauthorized)
	}
	for _, c := range []call{
		{method: "POST", path: "/api/v1/services/api/flip"},
		{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-stable": 50, "api-canary": 50}}},
		{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(50, 50)}},
		{method: "POST", path: "/api/v1/generations/1/rollback"},
	} {
		c.header = reader
		p := e.do(c).want(t, http.StatusForbidden).problem(t)
		if !strings.Contains(p.Detail, "read token") {
			t.Errorf("%s %s: problem %q", c.method, c.path, p.Detail)
		}
	}
	if n := e.generationCount(); n != 1 {
		t.Errorf("the read token changed something: %d generations", n)
	}
	e.do(call{method: "POST", path: "/api/v1/services/api/flip", header: admin}).want(t, http.StatusCreated)

	refused := 0
	for _, a := range e.auditWith(admin) {
		if a.Status == http.StatusForbidden {
			refused += a.Count
			if a.Actor != actorReadToken || a.Outcome != apiv1.OutcomeRefused {
				t.Errorf("read-token refusal entry = %+v", a)
			}
		}
	}
	if refused != 4 {
		t.Errorf("%d read-token refusals audited, want 4", refused)
	}
}

// A read token without an admin token makes a read-only API: reads need
// the read token, and nothing can be changed.
func TestReadOnlyAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{ReadToken: "read-secret"})
	reader := map[string]string{"Authorization": "Bearer read-secret"}
	e.do(call{method: "GET", path: "/api/v1/generations"}).want(t, http.StatusUnauthorized)
	e.do(call{method: "GET", path: "/api/v1/generations", header: reader}).want(t, http.StatusOK)
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}}).
		want(t, http.StatusUnauthorized)
	p := e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}, header: reader}).
		want(t, http.StatusForbidden).problem(t)
	if !strings.Contains(p.Detail, "read-only") {
		t.Errorf("problem %q", p.Detail)
	}
	if n := e.generationCount(); n != 0 {
		t.Errorf("%d generations in a read-only API", n)
	}
}

func TestRoleOf(t *testing.T) {
	t.Parallel()
	s := New(Options{Store: nilStore(), Token: "a", ReadToken: "r"})
	for token, want := range map[string]role{"a": roleAdmin, " a ": roleAdmin, "r": roleRead, "": roleNone, "ar": roleNone, "A": roleNone} {
		if got := s.roleOf(token); got != want {
			t.Errorf("roleOf(%q) = %d, want %d", token, got, want)
		}
	}
	// An empty token never matches an unset one.
	s = New(Options{Store: nilStore(), Token: "a"})
	if got := s.roleOf(""); got != roleNone {
		t.Errorf("roleOf(\"\") without a read token = %d", got)
	}
}

// nilStore is a Store that is never used, for tests of what needs none.
func nilStore() *db.Store { return &db.Store{} }
