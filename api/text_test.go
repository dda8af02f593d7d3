package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dwara/dwara/api/apiv1"
)

// PostgreSQL cannot store a NUL, and encoding/json would store invalid
// UTF-8 as U+FFFD: both are refused with 422 (400 for a path parameter)
// naming the field, and nothing is stored.
func TestTextThatCannotBeStoredIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specWith(90, 10), "")
	weights := "/api/v1/services/api/weights"
	tests := []struct {
		name   string
		call   call
		status int
		path   string
	}{
		{"NUL in a flip message", call{method: "POST", path: "/api/v1/services/api/flip", body: `{"message": "a\u0000b"}`}, 422, "message"},
		{"invalid UTF-8 in a flip message", call{method: "POST", path: "/api/v1/services/api/flip", body: "{\"message\": \"a\xffb\"}"}, 422, "message"},
		{"unpaired surrogate in a kill message", call{method: "POST", path: "/api/v1/services/api/kill", body: `{"message": "a\ud800b"}`}, 422, "message"},
		{"NUL in a weights message", call{method: "PUT", path: weights, body: `{"weights": {"api-stable": 80, "api-canary": 20}, "message": "x\u0000"}`}, 422, "message"},
		{"NUL in a weights key", call{method: "PUT", path: weights, body: `{"weights": {"api-stable\u0000": 90}}`}, 422, `weights."api-stable\x00"`},
		{"invalid UTF-8 in a weights key", call{method: "PUT", path: weights, body: "{\"weights\": {\"api-\xfe\": 90}}"}, 422, `weights."api-\xfe"`},
		{"NUL in a rollback message", call{method: "POST", path: "/api/v1/generations/1/rollback", body: `{"message": "\u0000"}`}, 422, "message"},
		{"NUL in a pause message", call{method: "POST", path: "/api/v1/services/api/canary/pause", body: `{"message": "\u0000"}`}, 422, "message"},
		{"NUL in a publish message", call{method: "POST", path: "/api/v1/generations", body: `{"message": "\u0000", "spec": ` + string(specWith(80, 20).JSON()) + `}`}, 422, "message"},
		{"NUL in a YAML publish message", call{method: "POST", path: "/api/v1/generations", contentType: "application/yaml",
			body: "message: \"a\\0b\"\nspec: " + string(specWith(80, 20).JSON())}, 422, "message"},
		{"invalid UTF-8 in a spec path", call{method: "POST", path: "/api/v1/generations",
			body: strings.Replace(`{"spec": `+string(specWith(80, 20).JSON())+`}`, `"base_path":"/v1"`, "\"base_path\":\"/v1\xff\"", 1)}, 422, "services[0].base_path"},
		{"NUL in a service name", call{method: "POST", path: "/api/v1/services/a%00b/flip"}, 400, "name"},
		{"invalid UTF-8 in a service name", call{method: "POST", path: "/api/v1/services/a%FFb/kill"}, 400, "name"},
		{"NUL in a canary service name", call{method: "POST", path: "/api/v1/services/a%00b/canary/adopt"}, 400, "name"},
		{"NUL in a canary events filter", call{method: "GET", path: "/api/v1/canary/events?service=a%00b"}, 400, "service"},
	}
	for _, tt := range tests {
		c := tt.call
		c.violates = true
		r := e.do(c)
		if r.status != tt.status {
			t.Errorf("%s: status %d, want %d; body %s", tt.name, r.status, tt.status, r.body)
			continue
		}
		if p := r.problem(t); !slices.Contains(paths(p), tt.path) {
			t.Errorf("%s: errors %v lack path %q", tt.name, p.Errors, tt.path)
		}
	}
	if n := e.generationCount(); n != 1 {
		t.Errorf("%d generations, want only the first", n)
	}
	// Each refused mutation left its audit entry.
	mutations := 0
	for _, tt := range tests {
		if tt.call.method != "GET" {
			mutations++
		}
	}
	refused := 0
	for _, a := range e.audit() {
		if a.Outcome == apiv1.OutcomeRefused {
			refused += a.Count
		}
	}
	if refused != mutations {
		t.Errorf("%d refusals audited, want %d", refused, mutations)
	}
}

// The audit entry of any refusal can be written, whatever the call
// carried: NULs and invalid UTF-8 in the path, the body, the headers and
// what the handler noted.
func TestRefusalWithNULsEverywhereIsAudited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	r := e.do(call{method: "PUT", path: "/api/v1/services/a%00b%FF/weights?x=%00",
		body:     "{\"weights\": {\"k\\u0000\": 1, \"\xff\": 2}, \"message\": \"\\u0000\xff\"}",
		header:   map[string]string{"X-Dwara-Actor": "mal\xfflory", "Origin": "http://\xffevil"},
		violates: true})
	if r.status < 400 {
		t.Fatalf("status %d, want a refusal", r.status)
	}
	entries := e.audit()
	if len(entries) != 1 || entries[0].Status != r.status || entries[0].Outcome != apiv1.OutcomeRefused {
		t.Fatalf("audit = %+v, want the refusal", entries)
	}

	// And a refusal whose record holds NULs everywhere, as a handler could
	// note them, is written with them replaced.
	req, err := http.NewRequestWithContext(t.Context(), "POST", "/api/v1/services/x/flip", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.RemoteAddr = "192.0.2.1:1\x00"
	req = req.WithContext(context.WithValue(req.Context(), requestIDKey, "id\x00"))
	rec := &auditRecord{action: "flip\x00", actor: "a\x00\xff", clientRequestID: "c\x00", detail: map[string]any{
		"service\x00": "s\x00\xff", "weights": map[string]int{"k\x00": 1}, "message": strings.Repeat("\x00", 5000),
	}}
	rec.problem = problemf(http.StatusNotFound, "service %s does not exist", "s\x00")
	if limited, _ := e.srv.recordAudit(req, rec, http.StatusNotFound); limited {
		t.Fatal("limited")
	}
	entries = e.audit()
	if len(entries) != 2 {
		t.Fatalf("audit = %+v, want the second refusal too", entries)
	}
	a := entries[0]
	for _, v := range []string{a.Actor, a.Action, a.RequestID, a.ClientRequestID, a.RemoteAddr, string(a.Detail)} {
		if strings.ContainsRune(v, 0) || strings.Contains(v, `\u0000`) || !utf8.ValidString(v) {
			t.Errorf("stored %q", v)
		}
	}
	if a.Actor != "a\u2400\uFFFD" || !strings.Contains(string(a.Detail), "service\u2400") {
		t.Errorf("entry = %+v", a)
	}
}

func TestTextErrorsPaths(t *testing.T) {
	t.Parallel()
	for body, want := range map[string][]string{
		`{"a": "ok", "b": ["x", "y\u0000"]}`:                          {"b[1]"},
		`{"spec": {"services": [{"name": "a"}, {"name": "\ud800"}]}}`: {"spec.services[1].name"},
		`{"k": "\ud83d\ude00 is a pair"}`:                             nil,
		`{"k": "\\u0000 is text"}`:                                    nil,
		`{"k": "\ufffd is a character"}`:                              nil,
		"{\"k\": \"\xef\xbf\xbd as UTF-8\"}":                          nil,
		"{\"a.b\\u0000\": 1, \"c\": {\"d\": \"\xc3\"}}":               {`"a.b\x00"`, "c.d"},
		`["\udc00", {"x": [1, 2, "\u0000"]}]`:                         {"[0]", "[1].x[2]"},
		`{"broken": "\u0000`:                                          nil, // a syntax error stops it quietly
	} {
		var got []string
		for _, e := range textErrors([]byte(body)) {
			got = append(got, e.Path)
		}
		if !slices.Equal(got, want) {
			t.Errorf("textErrors(%q) paths = %q, want %q", body, got, want)
		}
	}
}

// TestPlainText: the shortcut of textErrors never skips a body with a
// fault, whatever the case of the escape's hex digits.
func TestPlainText(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]bool{
		`{"a": "ok", "b": ["x", "y"]}`:       true,
		`{"k": "\u00e9t\u00E9 \u2028"}`:      true,
		"{\"k\": \"\xef\xbf\xbd as UTF-8\"}": true,
		`{"a": "ok", "b": ["x", "y\u0000"]}`: false,
		`{"name": "\ud800"}`:                 false,
		`{"name": "\uD800"}`:                 false,
		`{"name": "\uDc00"}`:                 false,
		`{"k": "\ud83d\ude00 is a pair"}`:    false, // walked, no fault
		`{"k": "\\u0000 is text"}`:           false, // walked, no fault
		"{\"c\": {\"d\": \"\xc3\"}}":         false,
		`{"k": "\u`:                          false,
	} {
		if got := plainText([]byte(body)); got != want {
			t.Errorf("plainText(%q) = %t, want %t", body, got, want)
		}
		if plainText([]byte(body)) && len(textErrors([]byte(body))) > 0 {
			t.Errorf("plainText(%q) but textErrors finds faults", body)
		}
	}
}
