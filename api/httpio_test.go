package api

import (
	"net/http"
	"strings"
	"testing"
)

// A UTF-8 byte order mark before a JSON body, which some editors and tools
// write, is ignored (RFC 8259 section 8.1), by the API's own decoder as by
// the spec decoder.
func TestJSONBodyWithBOM(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")
	const bom = "\xEF\xBB\xBF"
	g := e.do(call{method: "POST", path: "/api/v1/services/api/flip", body: bom + `{"message": "from notepad"}`, violates: true}).
		want(t, http.StatusCreated).generation(t)
	if g.Message != "from notepad" {
		t.Errorf("message %q", g.Message)
	}
	e.do(call{method: "PUT", path: "/api/v1/services/api/weights", body: bom + `{"weights": {"api-stable": 50, "api-canary": 50}}`, violates: true}).
		want(t, http.StatusCreated)
	e.do(call{method: "POST", path: "/api/v1/generations", body: bom + `{"spec": ` + string(specWith(80, 20).JSON()) + `}`, violates: true}).
		want(t, http.StatusCreated)
	// A BOM alone is an empty body.
	e.do(call{method: "POST", path: "/api/v1/services/api/kill", body: bom, violates: true}).want(t, http.StatusCreated)
}

// A 415 problem says what Content-Type was sent, as it was sent, and what
// is accepted.
func TestUnsupportedMediaTypeSaysWhatWasSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")
	tests := []struct {
		contentType string
		path        string
		says        []string
	}{
		{"application/json;;", "/api/v1/services/api/flip", []string{`"application/json;;"`, "malformed", "application/json"}},
		{"application/json; charset", "/api/v1/generations", []string{`"application/json; charset"`, "malformed"}},
		{"text/csv", "/api/v1/generations", []string{`"text/csv"`, "not accepted", "application/yaml"}},
		{"application/yaml", "/api/v1/services/api/flip", []string{`"application/yaml"`, "application/json"}},
		{strings.Repeat("x", 300) + "/y", "/api/v1/services/api/flip", []string{`"xxx`, `"...`}},
	}
	for _, tt := range tests {
		r := e.do(call{method: "POST", path: tt.path, body: `{"message": "x"}`, contentType: tt.contentType, violates: true})
		if r.status != http.StatusUnsupportedMediaType {
			t.Errorf("%s: status %d, want 415; body %s", tt.contentType, r.status, r.body)
			continue
		}
		p := r.problem(t)
		for _, s := range tt.says {
			if !strings.Contains(p.Detail, s) {
				t.Errorf("%s: detail %q does not say %s", tt.contentType, p.Detail, s)
			}
		}
		if strings.Contains(p.Detail, "(none)") || len(p.Detail) > 400 {
			t.Errorf("%s: detail %q", tt.contentType, p.Detail)
		}
	}
}
