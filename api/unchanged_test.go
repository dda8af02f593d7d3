package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// TestYAMLDuplicateKeyAndSecondDocument: a YAML body that the file source
// would refuse is refused by the API too, with 422 naming the line, and
// nothing is stored.
func TestYAMLDuplicateKeyAndSecondDocument(t *testing.T) {
	t.Parallel()
	const spec = `spec:
  upstreams:
    - name: api-stable
      endpoints: ["127.0.0.1:9001"]
  services:
    - name: api
      base_path: /v1
      upstream: api-stable
`
	tests := []struct {
		name, body, path, msg string
	}{
		{"duplicate key", strings.Replace(spec, "      base_path: /v1\n", "      base_path: /v1\n      base_path: /v2\n", 1),
			"spec.services[0].base_path", "duplicate key at line 8 (first at line 7)"},
		{"duplicate envelope key", "message: a\nmessage: b\n" + spec, "message", "duplicate key at line 2 (first at line 1)"},
		{"second document", spec + "---\nspec: {}\n", "", "a second document starts at line 10"},
	}
	e := newEnv(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.in(t).do(call{method: "POST", path: "/api/v1/generations", body: tt.body, contentType: "application/yaml", violates: true}).
				want(t, http.StatusUnprocessableEntity).problem(t)
			if len(p.Errors) != 1 || p.Errors[0].Path != tt.path || !strings.Contains(p.Errors[0].Message, tt.msg) {
				t.Errorf("errors = %v, want one at %q containing %q", p.Errors, tt.path, tt.msg)
			}
			// The one decoder, which the CLI and the file source use too,
			// refuses the same document with the same words.
			if _, err := config.ParseEnvelope([]byte(tt.body), config.FormatYAML); err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("config.ParseEnvelope = %v, want an error containing %q", err, tt.msg)
			}
		})
	}
	if n := e.generationCount(); n != 0 {
		t.Errorf("%d generations stored by refused YAML bodies, want 0", n)
	}
	if a := e.lastAudit(); a.Outcome != apiv1.OutcomeRefused || a.Status != http.StatusUnprocessableEntity {
		t.Errorf("last audit entry = %+v, want a refused 422", a)
	}
}

// TestUnchanged: a change whose result equals the active spec stores
// nothing, answers 200 with the active generation and "unchanged": true,
// applies nothing, and is audited as unchanged.
func TestUnchanged(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var applied []int64
	e := newEnv(t, Options{OnPublish: func(_ context.Context, id int64, _ *config.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		applied = append(applied, id)
		return nil
	}})
	e.publish(specWith(95, 5), "first")           // 1
	e.publish(specWith(100, 0), "killed by hand") // 2
	e.publish(specWith(95, 5), "again")           // 3
	unchanged := []struct {
		name string
		call call
	}{
		{"the active spec again", call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(95, 5), "message": "no-op"}}},
		{"the active spec again, as YAML", call{method: "POST", path: "/api/v1/generations", contentType: "application/yaml",
			body: "spec:\n" + indent(specWith(95, 5).YAML())}},
		{"weights equal to the current ones", call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"api-stable": 95}}}},
		{"a rollback to a generation with the active spec", call{method: "POST", path: "/api/v1/generations/1/rollback"}},
	}
	for _, tt := range unchanged {
		t.Run(tt.name, func(t *testing.T) {
			r := e.in(t).do(tt.call).want(t, http.StatusOK)
			g := r.generation(t)
			if !g.Unchanged || g.ID != 3 || len(g.Spec) == 0 {
				t.Errorf("answer = id %d unchanged %t; want the active generation 3 with its spec, unchanged", g.ID, g.Unchanged)
			}
			if got := r.header.Get("ETag"); got != `"3"` {
				t.Errorf("ETag = %q, want \"3\"", got)
			}
			if r.header.Get("Location") != "" {
				t.Errorf("Location %q on an unchanged answer", r.header.Get("Location"))
			}
			a := e.in(t).lastAudit()
			if a.Outcome != apiv1.OutcomeUnchanged || a.Status != http.StatusOK || a.GenerationID == nil || *a.GenerationID != 3 {
				t.Errorf("audit entry = %+v, want outcome unchanged, status 200, generation 3", a)
			}
		})
	}
	// A kill stores one generation; a second kill is unchanged.
	e.do(call{method: "POST", path: "/api/v1/services/api/kill"}).want(t, http.StatusCreated)
	if g := e.do(call{method: "POST", path: "/api/v1/services/api/kill"}).want(t, http.StatusOK).generation(t); !g.Unchanged || g.ID != 4 {
		t.Errorf("second kill = id %d unchanged %t, want generation 4 unchanged", g.ID, g.Unchanged)
	}
	if n := e.generationCount(); n != 4 {
		t.Errorf("%d generations stored, want 4", n)
	}
	// Only the calls that stored a generation went to the data plane.
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(applied, []int64{1, 2, 3, 4}) {
		t.Errorf("OnPublish saw %v, want [1 2 3 4]", applied)
	}
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}
