package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apitest"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
)

// cliAPI is a real API over a fresh database, served on 127.0.0.1, and the
// environment the client verbs see when they call it.
type cliAPI struct {
	url   string
	store *db.Store
	env   map[string]string
}

// startCLIAPI starts an API; token "" means one without auth. The verbs run
// against it as "alice" (through $USER) with the token in
// $DWARA_ADMIN_TOKEN.
func startCLIAPI(t *testing.T, token string) *cliAPI {
	t.Helper()
	url, store := apitest.Start(t, token)
	return &cliAPI{
		url:   url,
		store: store,
		env:   map[string]string{"DWARA_API_URL": url, "USER": "alice", "DWARA_ADMIN_TOKEN": token},
	}
}

// cliResult is what one run of a client verb did.
type cliResult struct {
	code           int
	stdout, stderr string
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runVerb runs `dwara args...` through Run, as main does, with stdin
// and the environment env.
func runVerb(t *testing.T, env map[string]string, stdin string, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(t.Context(), args, IO{
		In:     strings.NewReader(stdin),
		Out:    &out,
		Err:    &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	return cliResult{code: code, stdout: out.String(), stderr: errOut.String()}
}

// run runs a verb against a with an empty stdin.
func (a *cliAPI) run(t *testing.T, args ...string) cliResult {
	t.Helper()
	return runVerb(t, a.env, "", args...)
}

// must runs a verb that must succeed and returns its stdout.
func (a *cliAPI) must(t *testing.T, args ...string) string {
	t.Helper()
	r := a.run(t, args...)
	if r.code != 0 {
		t.Fatalf("dwara %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// current returns the active generation.
func (a *cliAPI) current(t *testing.T) apiv1.Generation {
	t.Helper()
	g, err := a.store.Current(t.Context())
	if err != nil {
		t.Fatalf("current generation: %v", err)
	}
	return g
}

// count returns the number of stored generations.
func (a *cliAPI) count(t *testing.T) int {
	t.Helper()
	gens, err := a.store.List(t.Context(), 1000, 0)
	if err != nil {
		t.Fatalf("list generations: %v", err)
	}
	return len(gens)
}

// cliSpecYAML is spectest.Canary as YAML, with extra endpoints added to
// api-canary.
func cliSpecYAML(stable, canary int, extra ...string) string {
	return spectest.Canary(stable, canary).Edit(func(s *config.Spec) {
		s.Upstreams[1].Endpoints = append(s.Upstreams[1].Endpoints, extra...)
	}).YAML()
}

// cliSpecJSON is spectest.Canary as JSON.
func cliSpecJSON(stable, canary int) string {
	return string(spectest.Canary(stable, canary).JSON())
}

// writeSpec writes content to a file name in a fresh directory.
func writeSpec(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// splitWeights returns the weights of service "api" in g.
func splitWeights(t *testing.T, g apiv1.Generation) []int {
	t.Helper()
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		t.Fatalf("decode spec of generation %d: %v", g.ID, err)
	}
	svc, _ := spec.Service("api")
	if svc == nil || svc.Split == nil {
		t.Fatalf("generation %d has no split service api", g.ID)
	}
	var ws []int
	for _, tg := range svc.Split.Targets {
		ws = append(ws, tg.Weight)
	}
	return ws
}

func TestApply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		file      string // file name; "" means -f - with content on stdin
		content   string
		args      []string
		env       map[string]string // overrides
		wantOut   string
		wantMsg   string
		wantActor string
	}{
		{name: "YAML file", file: "spec.yaml", content: cliSpecYAML(95, 5), args: []string{"-m", "canary at 5%"},
			wantOut: "generation 1 created (create) by alice: canary at 5%\n", wantMsg: "canary at 5%", wantActor: "alice"},
		{name: "JSON file", file: "spec.json", content: cliSpecJSON(95, 5),
			wantOut: "generation 1 created (create) by alice: apply spec.json\n", wantMsg: "apply spec.json", wantActor: "alice"},
		{name: "YAML on stdin", content: cliSpecYAML(95, 5), args: []string{"--actor", "carol", "-m", "from a pipe"},
			wantOut: "generation 1 created (create) by carol: from a pipe\n", wantMsg: "from a pipe", wantActor: "carol"},
		{name: "JSON on stdin", content: cliSpecJSON(95, 5), env: map[string]string{"USER": "bob"},
			wantOut: "generation 1 created (create) by bob: apply stdin\n", wantMsg: "apply stdin", wantActor: "bob"},
		{name: "a whole request body", file: "gen.yaml",
			content: "message: from the file\nspec:\n" + indent(cliSpecYAML(95, 5)),
			wantOut: "generation 1 created (create) by alice: from the file\n", wantMsg: "from the file", wantActor: "alice"},
		{name: "a request body with -m", file: "gen.json",
			content: `{"message": "from the file", "spec": ` + cliSpecJSON(95, 5) + `}`, args: []string{"-m", "from the flag"},
			wantOut: "generation 1 created (create) by alice: from the flag\n", wantMsg: "from the flag", wantActor: "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := startCLIAPI(t, "")
			env := maps(a.env, tt.env)
			args := []string{"apply", "-f", "-"}
			stdin := tt.content
			if tt.file != "" {
				args[2], stdin = writeSpec(t, tt.file, tt.content), ""
			}
			r := runVerb(t, env, stdin, append(args, tt.args...)...)
			if r.code != 0 || r.stdout != tt.wantOut || r.stderr != "" {
				t.Fatalf("got %s\nwant stdout %q", r, tt.wantOut)
			}
			g := a.current(t)
			if g.ID != 1 || g.Action != apiv1.ActionCreate || g.Author != tt.wantActor || g.Message != tt.wantMsg {
				t.Errorf("stored %+v", g)
			}
			if ws := splitWeights(t, g); !slices.Equal(ws, []int{95, 5}) {
				t.Errorf("stored weights %v, want [95 5]", ws)
			}
		})
	}
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

// maps returns a copy of base with over applied.
func maps(base, over map[string]string) map[string]string {
	m := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range over {
		m[k] = v
	}
	return m
}

func TestApplyDryRun(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")

	// Before any generation the impact is against the empty configuration.
	r := runVerb(t, a.env, cliSpecYAML(95, 5), "apply", "-f", "-", "--dry-run")
	if r.code != 0 || !strings.Contains(r.stdout, "the proposed spec against an empty configuration") ||
		!regexp.MustCompile(`(?m)^api\s+added\s+100\.0%\s+split api-stable 95 / api-canary 5$`).MatchString(r.stdout) {
		t.Fatalf("dry run on an empty database: %s", r)
	}
	if n := a.count(t); n != 0 {
		t.Fatalf("a dry run stored %d generations", n)
	}

	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
	path := writeSpec(t, "spec.yaml", cliSpecYAML(90, 10, "127.0.0.1:9102"))
	r = a.run(t, "apply", "--dry-run", "-f", path, "-m", "ramp")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("dry run: %s", r)
	}
	for _, re := range []string{
		`^dry run: the spec is valid; nothing was stored\n`,
		`(?m)^the proposed spec against generation 1$`,
		`(?m)^SERVICE\s+CHANGE\s+MOVED\s+DETAILS$`,
		`(?m)^api\s+modified\s+5\.0%\s+weights api-stable 95->90; weights api-canary 5->10$`,
		`(?m)^api-canary\s+modified\s+endpoint added 127\.0\.0\.1:9102$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Errorf("dry run output lacks %s:\n%s", re, r.stdout)
		}
	}
	if n := a.count(t); n != 1 {
		t.Errorf("after a dry run %d generations are stored, want 1", n)
	}

	r = a.run(t, "apply", "--dry-run", "--json", "-f", path)
	var res apiv1.DryRunResult
	if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 0 || err != nil {
		t.Fatalf("dry run --json: %v\n%s", err, r)
	}
	if !res.Valid || len(res.Impact.Services) != 1 || res.Impact.Services[0].MovedShare != 0.05 {
		t.Errorf("dry run --json = %+v", res)
	}
	if n := a.count(t); n != 1 {
		t.Errorf("after a dry run %d generations are stored, want 1", n)
	}
}

// TestApplyDryRunCanaryReset shows, on a dry run and a diff, the canary a
// publish would start afresh, and no such line when none is.
func TestApplyDryRunCanaryReset(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	ca := config.CanaryAnalysis{Enabled: true, Promote: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05}}
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", spectest.Canary(90, 10).Analysis(ca).YAML()))
	reset := regexp.MustCompile(`(?m)^canary reset: api \(started afresh`)
	if r := a.run(t, "apply", "--dry-run", "-f", writeSpec(t, "spec.yaml", spectest.Canary(80, 20).Analysis(ca).YAML())); r.code != 0 || !reset.MatchString(r.stdout) {
		t.Errorf("dry run of new weights: %s", r)
	}
	carried := spectest.Canary(90, 10).Analysis(ca).Host("example.test").YAML()
	if r := a.run(t, "apply", "--dry-run", "-f", writeSpec(t, "spec.yaml", carried)); r.code != 0 || strings.Contains(r.stdout, "canary reset") {
		t.Errorf("dry run of a new host: %s", r)
	}
}

func TestApplyInvalid(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	bad := `upstreams:
  - name: api-stable
    endpoints: []
  - name: api-canary
    endpoints: ["127.0.0.1:9101"]
services:
  - name: api
    base_path: v1
    split:
      targets:
        - { upstream: api-stable, weight: -3 }
        - { upstream: api-canry, weight: 5 }
`
	r := a.run(t, "apply", "-f", writeSpec(t, "bad.yaml", bad))
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("apply of an invalid spec: %s", r)
	}
	// The one decoder refuses it before anything is sent.
	if !regexp.MustCompile(`^dwara apply: the spec in \S*bad\.yaml is invalid; nothing was sent\n`).MatchString(r.stderr) {
		t.Errorf("stderr does not start with the problem:\n%s", r.stderr)
	}
	// Every error the validator finds is printed as "path: message".
	_, err := config.Parse([]byte(bad))
	v, ok := errors.AsType[*config.ValidationError](err)
	if !ok || len(v.Errors) < 4 {
		t.Fatalf("the test spec should have several errors, got %v", err)
	}
	for _, fe := range v.Errors {
		if !strings.Contains(r.stderr, "\n  "+fe.Path+": "+fe.Message+"\n") {
			t.Errorf("stderr lacks %q:\n%s", fe.String(), r.stderr)
		}
	}
	for _, path := range []string{"upstreams[0].endpoints", "services[0].base_path", "services[0].split.targets[0].weight", "services[0].split.targets[1].upstream"} {
		if !strings.Contains(r.stderr, "\n  "+path+": ") {
			t.Errorf("stderr lacks the path %s:\n%s", path, r.stderr)
		}
	}
	if n := a.count(t); n != 0 {
		t.Errorf("an invalid spec stored %d generations", n)
	}
	// With --json the problem document is also printed, for scripts.
	r = a.run(t, "apply", "--json", "-f", writeSpec(t, "bad.yaml", bad))
	var p apiv1.Problem
	if err := json.Unmarshal([]byte(r.stdout), &p); r.code != 1 || err != nil || p.Status != 422 || len(p.Errors) != len(v.Errors) {
		t.Errorf("apply --json of an invalid spec: %v, %+v\n%s", err, p, r)
	}

	// Problems found before the call: nothing is sent.
	local := []struct {
		name, content, want string
	}{
		{"broken YAML", "services: [\n", "invalid YAML"},
		{"two YAML documents", cliSpecYAML(95, 5) + "---\nservices: []\n", "a second document starts at line"},
		{"broken JSON", `{"services": [}`, "invalid JSON"},
		{"duplicate YAML key", "services: []\nservices: []\n", "services: duplicate key at line 2 (first at line 1)"},
		{"empty", "\n\n", "is empty"},
	}
	for _, tt := range local {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := a.run(t, "apply", "-f", writeSpec(t, "spec.yaml", tt.content))
			if r.code != 1 || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("want exit 1 and %q: %s", tt.want, r)
			}
		})
	}
	// A trailing comma, in a spec or in a whole request body, is named by
	// its line and column, and nothing else is reported.
	comma := []struct {
		name, content, want string
	}{
		{"trailing comma in a JSON spec", "{\n  \"upstreams\": [{\"name\": \"a\", \"endpoints\": [\"127.0.0.1:1\"]}],\n" +
			"  \"services\": [{\"name\": \"s\", \"upstream\": \"a\"},]\n}\n",
			"  services[1]: invalid JSON at line 3, column 47: invalid character ']' looking for beginning of value\n"},
		{"trailing comma in a request body's spec", "{\n  \"message\": \"m\",\n  \"spec\": {\n" +
			"    \"upstreams\": [{\"name\": \"a\", \"endpoints\": [\"127.0.0.1:1\"]},],\n" +
			"    \"services\": [{\"name\": \"s\", \"upstream\": \"a\"}]\n  }\n}\n",
			"  spec: invalid JSON at line 4, column 63: invalid character ']' looking for beginning of value\n"},
		{"trailing comma after a request body's spec", "{\n  \"message\": \"m\",\n" +
			"  \"spec\": {\"upstreams\": [{\"name\": \"a\", \"endpoints\": [\"127.0.0.1:1\"]}], \"services\": [{\"name\": \"s\", \"upstream\": \"a\"}]},\n}\n",
			"  invalid JSON at line 4, column 1: invalid character '}' looking for beginning of object key string\n"},
	}
	for _, tt := range comma {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := writeSpec(t, "gen.json", tt.content)
			r := a.run(t, "apply", "-f", path)
			if want := "dwara apply: the spec in " + path + " is invalid; nothing was sent\n" + tt.want; r.code != 1 || r.stderr != want {
				t.Errorf("want exit 1 and stderr\n%s\ngot %s", want, r)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		r := a.run(t, "apply", "-f", filepath.Join(t.TempDir(), "nope.yaml"))
		if r.code != 1 || !strings.Contains(r.stderr, "nope.yaml: no such file") {
			t.Errorf("want exit 1 naming the file: %s", r)
		}
	})
}

func TestApplyIfMatch(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	path := writeSpec(t, "spec.yaml", cliSpecYAML(95, 5))
	a.must(t, "apply", "-f", path, "--if-match", "0")
	a.must(t, "apply", "-f", writeSpec(t, "ramp.yaml", cliSpecYAML(90, 10)))

	r := a.run(t, "apply", "-f", path, "--if-match", "1")
	if r.code != 1 || r.stdout != "" ||
		!strings.Contains(r.stderr, "dwara apply: 412 Precondition Failed: If-Match asks for generation 1 but the active generation is 2\n") ||
		!strings.Contains(r.stderr, "hint: another change was published first") {
		t.Fatalf("apply with a stale --if-match: %s", r)
	}
	if n := a.count(t); n != 2 {
		t.Errorf("a refused apply left %d generations, want 2", n)
	}
	if out := a.must(t, "apply", "-f", path, "--if-match", "2"); out != "generation 3 created (create) by alice: apply spec.yaml\n" {
		t.Errorf("apply --if-match 2 printed %q", out)
	}
	// The active spec again: nothing is stored, and the CLI says so.
	if out := a.must(t, "apply", "-f", path); out != "unchanged: generation 3 is active and already has this spec; nothing was stored\n" {
		t.Errorf("apply of the active spec printed %q", out)
	}
	if n := a.count(t); n != 3 {
		t.Errorf("an unchanged apply left %d generations, want 3", n)
	}
	if r := a.run(t, "apply", "-f", path, "--if-match", "two"); r.code != 2 || !strings.Contains(r.stderr, "--if-match must be a generation id") {
		t.Errorf("a malformed --if-match: %s", r)
	}
}

func TestEdits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		before  [][]string // verbs run first, after the 95/5 generation 1
		args    []string
		code    int
		out     string // exact stdout
		errLike string // substring of stderr
		action  string // of the active generation after the call ("": no new one)
		weights []int
		source  int64
	}{
		{name: "flip", args: []string{"flip", "api", "-m", "blue-green"},
			out: "generation 2 created (flip) by alice: blue-green\n", action: apiv1.ActionFlip, weights: []int{5, 95}},
		{name: "flip without a message", args: []string{"flip", "api"},
			out: "generation 2 created (flip) by alice: flip api\n", action: apiv1.ActionFlip, weights: []int{5, 95}},
		{name: "weights", args: []string{"weights", "api", "api-stable=90", "api-canary=10"},
			out: "generation 2 created (weights) by alice: weights api\n", action: apiv1.ActionWeights, weights: []int{90, 10}},
		{name: "weights reshuffle allowed", args: []string{"weights", "api", "api-canary=20", "--allow-reshuffle", "-m", "more"},
			out: "generation 2 created (weights) by alice: more\n", action: apiv1.ActionWeights, weights: []int{95, 20}},
		{name: "weights reshuffle refused", args: []string{"weights", "api", "api-canary=20"}, code: 1,
			errLike: "\n  weights: total weight would change from 100 to 115, which reshuffles every key between targets; keep the total at 100 or allow reshuffling\n" +
				"hint: keep the total, or add --allow-reshuffle to change it (every session may then move to another target)\n"},
		{name: "weights of an unknown target", args: []string{"weights", "api", "stable=90", "canary=10"}, code: 1,
			errLike: `weights: "canary" is not a target of service "api"; its targets are "api-stable", "api-canary"`},
		{name: "kill", args: []string{"kill", "api", "-m", "errors"},
			out: "generation 2 created (kill) by alice: errors\n", action: apiv1.ActionKill, weights: []int{100, 0}},
		{name: "rollback", before: [][]string{{"flip", "api"}, {"kill", "api"}}, args: []string{"rollback", "1"},
			out: "generation 4 created (rollback of 1) by alice: rollback to generation 1\n", action: apiv1.ActionRollback, weights: []int{95, 5}, source: 1},
		{name: "rollback with if-match", before: [][]string{{"flip", "api"}}, args: []string{"rollback", "--if-match", "2", "1", "-m", "undo"},
			out: "generation 3 created (rollback of 1) by alice: undo\n", action: apiv1.ActionRollback, weights: []int{95, 5}, source: 1},
		{name: "rollback to nothing", args: []string{"rollback", "7"}, code: 1,
			errLike: "dwara rollback: 404 Not Found: generation 7 does not exist"},
		{name: "flip an unknown service", args: []string{"flip", "nope"}, code: 1,
			errLike: `dwara flip: 404 Not Found: service "nope" does not exist in generation 1`},
		{name: "flip with a stale if-match", args: []string{"flip", "api", "--if-match", "5"}, code: 1,
			errLike: "412 Precondition Failed"},
		{name: "kill as json", args: []string{"kill", "api", "--json"}, action: apiv1.ActionKill, weights: []int{100, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := startCLIAPI(t, "")
			a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)))
			for _, b := range tt.before {
				a.must(t, b...)
			}
			before := a.count(t)
			r := a.run(t, tt.args...)
			if r.code != tt.code || (tt.out != "" && r.stdout != tt.out) || !strings.Contains(r.stderr, tt.errLike) {
				t.Fatalf("got %s\nwant exit %d, stdout %q, stderr with %q", r, tt.code, tt.out, tt.errLike)
			}
			if tt.action == "" {
				if n := a.count(t); n != before {
					t.Errorf("a refused call changed the generation count from %d to %d", before, n)
				}
				return
			}
			g := a.current(t)
			if g.ID != int64(before+1) || g.Action != tt.action || g.Author != "alice" {
				t.Errorf("active generation %+v, want %d (%s) by alice", g, before+1, tt.action)
			}
			if ws := splitWeights(t, g); !slices.Equal(ws, tt.weights) {
				t.Errorf("weights %v, want %v", ws, tt.weights)
			}
			if tt.source != 0 && (g.SourceID == nil || *g.SourceID != tt.source) {
				t.Errorf("source %v, want %d", g.SourceID, tt.source)
			}
			if slices.Contains(tt.args, "--json") {
				var got apiv1.Generation
				if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.ID != g.ID || got.Action != g.Action {
					t.Errorf("--json printed %q (%v); want generation %d", r.stdout, err, g.ID)
				}
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	// Usage mistakes never reach the API: there is none at this URL.
	env := map[string]string{"DWARA_API_URL": "http://127.0.0.1:1"}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"apply"}, "-f FILE is required"},
		{[]string{"apply", "-f", "x.yaml", "extra"}, `unexpected argument "extra"`},
		{[]string{"flip"}, "give exactly one SERVICE"},
		{[]string{"kill", "a", "b"}, "give exactly one SERVICE"},
		{[]string{"weights", "api"}, "at least one UPSTREAM=WEIGHT"},
		{[]string{"weights", "api", "api-stable"}, `"api-stable" is not UPSTREAM=WEIGHT`},
		{[]string{"weights", "api", "=5"}, `"=5" is not UPSTREAM=WEIGHT`},
		{[]string{"weights", "api", "a=-1"}, "must be a non-negative integer"},
		{[]string{"weights", "api", "a=1", "a=2"}, `upstream "a" is given twice`},
		{[]string{"rollback"}, "give exactly one generation ID"},
		{[]string{"rollback", "x"}, `ID must be a generation id (a positive integer), not "x"`},
		{[]string{"history", "x"}, `unexpected argument "x"`},
		{[]string{"history", "--limit", "-1"}, "--limit must be from 1 to 500, not -1"},
		{[]string{"history", "--limit", "0"}, "--limit must be from 1 to 500, not 0"},
		{[]string{"history", "--limit", "501"}, "--limit must be from 1 to 500, not 501"},
		{[]string{"history", "--actor", "bob"}, "flag provided but not defined: --actor"},
		{[]string{"diff", "--actor", "bob"}, "flag provided but not defined: --actor"},
		{[]string{"canary", "promote"}, "give exactly one SERVICE to promote"},
		{[]string{"canary", "promote", "a", "b"}, "give exactly one SERVICE to promote"},
		{[]string{"canary", "api", "-m", "why"}, "-m goes with promote"},
		{[]string{"flip", "api", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"diff", "1", "2"}, "at most one generation ID"},
		{[]string{"diff", "--against", "0", "2"}, "--against must be a generation id"},
		{[]string{"flip", "--bogus", "api"}, "flag provided but not defined: --bogus"},
		{[]string{"flip", "api", "--api", "ftp://x"}, "the scheme must be http or https"},
		{[]string{"canary", "a", "b"}, "give at most one SERVICE"},
		{[]string{"adopt"}, "give exactly one SERVICE"},
		{[]string{"adopt", "api", "--if-match", "x"}, "--if-match must be a generation id"},
		{[]string{"pause"}, "give exactly one SERVICE"},
		{[]string{"resume", "a", "b"}, "give exactly one SERVICE"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			r := runVerb(t, env, "", tt.args...)
			// One style: "dwara VERB: problem", then the verb's usage.
			first, rest, _ := strings.Cut(r.stderr, "\n")
			if r.code != 2 || !strings.HasPrefix(first, "dwara "+tt.args[0]+": ") || !strings.Contains(first, tt.want) ||
				!strings.HasPrefix(rest, "usage: dwara "+tt.args[0]+" ") || r.stdout != "" {
				t.Errorf("want exit 2, \"dwara %s: ...%s\" and the usage: %s", tt.args[0], tt.want, r)
			}
		})
	}
	for _, verb := range Verbs() {
		t.Run(verb+" --help", func(t *testing.T) {
			t.Parallel()
			r := runVerb(t, env, "", verb, "--help")
			if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "usage: dwara "+verb+" "+clientVerbs[verb].synopsis+" [flags]\n\n") ||
				!strings.Contains(r.stdout, "\nFlags:\n") || !strings.Contains(r.stdout, "\n  --api URL\n") || !strings.Contains(r.stdout, "\n  --timeout duration\n        give up on the API after this long (default 30s)\n") {
				t.Errorf("%s --help: %s", verb, r)
			}
			// Only the verbs that change something take --actor.
			// (config's is the actor it sets in a context.)
			if has, want := strings.Contains(r.stdout, "\n  --actor NAME\n"), clientVerbs[verb].mutating || verb == "config"; has != want {
				t.Errorf("%s --help lists --actor: %v, want %v:\n%s", verb, has, want, r.stdout)
			}
			if !strings.Contains(Usage, "dwara "+verb+" ") {
				t.Errorf("Usage does not list %s", verb)
			}
		})
	}
	t.Run("weights -h", func(t *testing.T) {
		t.Parallel()
		r := runVerb(t, env, "", "weights", "-h")
		if r.code != 0 || !strings.Contains(r.stdout, "usage: dwara weights SERVICE UPSTREAM=WEIGHT...") ||
			!strings.Contains(r.stdout, "\n  --allow-reshuffle\n") || !strings.Contains(r.stdout, "\n  -m MESSAGE\n") {
			t.Errorf("weights -h: %s", r)
		}
	})
}

// historyRow matches one row of the history table: id, action, source,
// author, created_at, message.
var historyRow = regexp.MustCompile(`^(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+)\s+(.*)$`)

func TestHistory(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	if out := a.must(t, "history"); out != "no generations\n" {
		t.Errorf("history of an empty database: %q", out)
	}
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", cliSpecYAML(95, 5)), "-m", "start")
	a.must(t, "weights", "api", "api-stable=90", "api-canary=10", "--actor", "bob")
	a.must(t, "flip", "api", "-m", "line one\nline two")
	a.must(t, "kill", "api")
	a.must(t, "rollback", "1")

	type row struct{ id, action, source, author, message string }
	// The rows are on stdout, the hint to the next page on stderr.
	table := func(args ...string) ([]row, string) {
		t.Helper()
		r := a.run(t, args...)
		if r.code != 0 {
			t.Fatalf("dwara %s: %s", strings.Join(args, " "), r)
		}
		out := r.stdout
		more, _ := strings.CutPrefix(strings.TrimSuffix(r.stderr, "\n"), "more: ")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if !regexp.MustCompile(`^ID\s+ACTION\s+SOURCE\s+AUTHOR\s+CREATED\s+MESSAGE$`).MatchString(lines[0]) {
			t.Fatalf("no table header:\n%s", out)
		}
		var rows []row
		for _, l := range lines[1:] {
			f := historyRow.FindStringSubmatch(l)
			if f == nil {
				t.Fatalf("not a history row: %q", l)
			}
			rows = append(rows, row{f[1], f[2], f[3], f[4], f[6]})
		}
		return rows, more
	}

	rows, more := table("history", "--limit", "2")
	want := []row{
		{"5", "rollback", "1", "alice", "rollback to generation 1"},
		{"4", "kill", "-", "alice", "kill api"},
	}
	if !slices.Equal(rows, want) || more != "dwara history --limit 2 --cursor 4" {
		t.Fatalf("first page %v, more %q", rows, more)
	}
	rows, more = table("history", "--limit", "2", "--cursor", "4")
	want = []row{
		{"3", "flip", "-", "alice", "line one line two"},
		{"2", "weights", "-", "bob", "weights api"},
	}
	if !slices.Equal(rows, want) || more != "dwara history --limit 2 --cursor 2" {
		t.Fatalf("second page %v, more %q", rows, more)
	}
	rows, more = table("history", "--cursor", "2", "--limit", "2")
	if !slices.Equal(rows, []row{{"1", "create", "-", "alice", "start"}}) || more != "" {
		t.Fatalf("last page %v, more %q", rows, more)
	}
	if rows, _ := table("history"); len(rows) != 5 {
		t.Errorf("history without --limit shows %d rows, want 5", len(rows))
	}
	if rows, more := table("history", "--limit", "500"); len(rows) != 5 || more != "" {
		t.Errorf("history --limit 500 shows %d rows and more %q, want 5 and none", len(rows), more)
	}

	var page apiv1.GenerationList
	if err := json.Unmarshal([]byte(a.must(t, "history", "--json", "--limit", "3")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 3 || page.Items[0].ID != 5 || page.NextCursor != "3" {
		t.Errorf("history --json = %+v", page)
	}
	if r := a.run(t, "history", "--cursor", "zero"); r.code != 1 || !strings.Contains(r.stderr, "\n  cursor: must be the next_cursor of a previous page") {
		t.Errorf("a bad cursor: %s", r)
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	a.must(t, "apply", "-f", writeSpec(t, "a.yaml", cliSpecYAML(95, 5)))
	a.must(t, "apply", "-f", writeSpec(t, "b.yaml", cliSpecYAML(90, 10, "127.0.0.1:9102")))

	moved := regexp.MustCompile(`(?m)^api\s+modified\s+5\.0%\s+weights api-stable 95->90; weights api-canary 5->10$`)
	for _, args := range [][]string{{"diff", "2"}, {"diff"}, {"diff", "2", "--against", "1"}} {
		out := a.must(t, args...)
		if !strings.HasPrefix(out, "generation 2 against generation 1\n") || !moved.MatchString(out) ||
			!regexp.MustCompile(`(?m)^api-canary\s+modified\s+endpoint added 127\.0\.0\.1:9102$`).MatchString(out) {
			t.Errorf("dwara %s:\n%s", strings.Join(args, " "), out)
		}
	}
	out := a.must(t, "diff", "1", "--against", "2")
	if !strings.HasPrefix(out, "generation 1 against generation 2\n") ||
		!regexp.MustCompile(`(?m)^api\s+modified\s+5\.0%\s+weights api-stable 90->95; weights api-canary 10->5$`).MatchString(out) {
		t.Errorf("diff 1 --against 2:\n%s", out)
	}
	out = a.must(t, "diff", "1")
	if !strings.HasPrefix(out, "generation 1 against an empty configuration") ||
		!regexp.MustCompile(`(?m)^api\s+added\s+100\.0%`).MatchString(out) {
		t.Errorf("diff 1:\n%s", out)
	}
	a.must(t, "flip", "api")
	if out := a.must(t, "diff", "3"); !regexp.MustCompile(`(?m)^api\s+modified\s+80\.0%`).MatchString(out) ||
		!strings.HasSuffix(out, "upstreams: no changes\n") {
		t.Errorf("diff of a flip 90/10 -> 10/90:\n%s", out)
	}

	var d apiv1.Diff
	if err := json.Unmarshal([]byte(a.must(t, "diff", "2", "--json")), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Services) != 1 || d.Services[0].MovedShare != 0.05 || *d.From != 1 || *d.To != 2 {
		t.Errorf("diff --json = %+v", d)
	}
	if r := a.run(t, "diff", "9"); r.code != 1 || !strings.Contains(r.stderr, "404 Not Found: generation 9 does not exist") {
		t.Errorf("diff of a missing generation: %s", r)
	}
}

func TestClientAuth(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "s3cret")
	path := writeSpec(t, "spec.yaml", cliSpecYAML(95, 5))
	tests := []struct {
		name, token string
		code        int
		errLike     string
	}{
		{"no token", "", 1, "dwara apply: 401 Unauthorized: this call needs an Authorization: Bearer <token> header\nhint: the API wants a token; give --token-file FILE, set $DWARA_ADMIN_TOKEN"},
		{"wrong token", "guess", 1, "401 Unauthorized: the bearer token is not valid\nhint: the token sent (from --token-file, $DWARA_ADMIN_TOKEN or the context's token-file) is not the server's admin token"},
	}
	// The refusals run in parallel; the group returns when all are done.
	t.Run("refusals", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := runVerb(t, maps(a.env, map[string]string{"DWARA_ADMIN_TOKEN": tt.token}), "", "apply", "-f", path)
				if r.code != tt.code || !strings.Contains(r.stderr, tt.errLike) {
					t.Errorf("want exit %d and %q: %s", tt.code, tt.errLike, r)
				}
			})
		}
	})
	if n := a.count(t); n != 0 {
		t.Errorf("refused calls stored %d generations", n)
	}
	if out := a.must(t, "apply", "-f", path); !strings.HasPrefix(out, "generation 1 created (create) by alice") {
		t.Errorf("apply with the token printed %q", out)
	}
	if out := a.must(t, "history"); !strings.Contains(out, "alice") {
		t.Errorf("history with the token printed %q", out)
	}
}

func TestClientConnectionRefused(t *testing.T) {
	t.Parallel()
	url := "http://" + testnet.ClosedAddr(t)
	r := runVerb(t, map[string]string{"DWARA_API_URL": url}, "", "history")
	if r.code != 1 || r.stdout != "" ||
		!strings.Contains(r.stderr, "dwara history: cannot reach the Dwara API at "+url+": connection refused\n") ||
		!strings.Contains(r.stderr, `Start one with "make run"`) {
		t.Errorf("history against a closed port: %s", r)
	}
	// --api wins over the environment.
	r = runVerb(t, map[string]string{"DWARA_API_URL": "http://127.0.0.1:1"}, "", "history", "--api", url)
	if r.code != 1 || !strings.Contains(r.stderr, url) {
		t.Errorf("--api is not used: %s", r)
	}
}

// canaryRow matches one row of the canary events table: time, service,
// generation, action, weights, reason.
var canaryRow = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+\s+(\S+)\s+(\d+)\s+(\S+)\s+(\d+->\d+)\s+(.*)$`)

// canaryEventRows returns the rows of the events table in out (after its
// header), each as "service gen action weights reason".
func canaryEventRows(t *testing.T, out string) []string {
	t.Helper()
	_, table, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("no events section:\n%s", out)
	}
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	if !regexp.MustCompile(`^TIME\s+SERVICE\s+GENERATION\s+ACTION\s+CANARY WEIGHT\s+REASON$`).MatchString(lines[0]) {
		t.Fatalf("no events table header:\n%s", out)
	}
	var rows []string
	for _, l := range lines[1:] {
		f := canaryRow.FindStringSubmatch(l)
		if f == nil {
			t.Fatalf("not an events row: %q", l)
		}
		rows = append(rows, strings.Join(f[1:], " "))
	}
	return rows
}

func TestCanaryVerbs(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	ctx := t.Context()
	spec := spectest.Canary(95, 5).Analysis(config.CanaryAnalysis{Enabled: true, WindowSeconds: 60, Step: 5, MinRequests: 10,
		Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
		Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05}}).
		Route("web", "/", "api-stable")

	if out := a.must(t, "canary"); out != "no canary groups in the active generation\n\nno canary events\n" {
		t.Errorf("canary before any generation: %q", out)
	}
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", spec.YAML()))
	out := a.must(t, "canary")
	if !regexp.MustCompile(`^SERVICE\s+STATE\s+WEIGHTS\s+WINDOW\s+BASELINE\s+CANARY\napi\s+running\s+95/5\s+60s\s+no requests\s+no requests\n\nno canary events\n$`).MatchString(out) {
		t.Errorf("canary of a fresh group:\n%s", out)
	}

	// The controller promotes 5 -> 65 in twelve steps; the fleet reports
	// its window.
	lock, err := a.store.TryCanaryLock(ctx)
	if err != nil || lock == nil {
		t.Fatalf("TryCanaryLock = %v, %v", lock, err)
	}
	t.Cleanup(func() { lock.Close(context.Background()) })
	for w := 5; w < 65; w += 5 {
		_, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: 1, Service: "api", FromWeight: w, ToWeight: w + 5,
			Action: apiv1.CanaryPromote, Reason: fmt.Sprintf("step %d", w/5)}, 5)
		if err != nil || !ok {
			t.Fatalf("Record = %v, %v", ok, err)
		}
	}
	err = a.store.FlushCanaryWindows(ctx, "gw-1", []db.CanaryWindowRow{
		{Generation: 1, Service: "api", Version: db.VersionBaseline, Requests: 200, Errors: 2, Latency: [][2]uint64{{500, 200}}},
		{Generation: 1, Service: "api", Version: db.VersionCanary, Requests: 20, Errors: 1, Latency: [][2]uint64{{500, 20}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"canary"}, {"canary", "api"}} {
		out := a.must(t, args...)
		group := regexp.MustCompile(`(?m)^api\s+running\s+95/5 -> 35/65\s+60s\s+200 req, 1\.00% err, p99 \d+\.\dms\s+20 req, 5\.00% err, p99 \d+\.\dms$`)
		if !group.MatchString(out) {
			t.Errorf("dwara %s: no group row:\n%s", strings.Join(args, " "), out)
		}
		rows := canaryEventRows(t, out)
		if len(rows) != 10 || rows[0] != "api 1 promote 60->65 step 12" || rows[9] != "api 1 promote 15->20 step 3" {
			t.Errorf("dwara %s: event rows %q; want the 10 newest", strings.Join(args, " "), rows)
		}
	}
	var list apiv1.CanaryList
	if err := json.Unmarshal([]byte(a.must(t, "canary", "--json")), &list); err != nil || len(list.Items) != 1 || list.Items[0].Weights != [2]int{35, 65} {
		t.Errorf("canary --json = %+v, %v", list, err)
	}
	if r := a.run(t, "canary", "web"); r.code != 1 || !strings.Contains(r.stderr, `dwara canary: service "web" is not a canary group of the active generation`) {
		t.Errorf("canary of a plain service: %s", r)
	}

	// Pause and resume, idempotent.
	for _, step := range []struct {
		args []string
		out  string
	}{
		{[]string{"pause", "api", "-m", "errors in EU"}, "canary group api: paused at 35/65 (generation 1)\n"},
		{[]string{"pause", "api"}, "canary group api: paused at 35/65 (generation 1)\n"},
		{[]string{"resume", "api"}, "canary group api: running at 35/65 (generation 1)\n"},
		{[]string{"resume", "api"}, "canary group api: running at 35/65 (generation 1)\n"},
	} {
		if out := a.must(t, step.args...); out != step.out {
			t.Errorf("dwara %s printed %q, want %q", strings.Join(step.args, " "), out, step.out)
		}
	}
	rows := canaryEventRows(t, a.must(t, "canary"))
	if rows[0] != "api 1 resume 65->65 resume canary of api (by alice)" || rows[1] != "api 1 pause 65->65 errors in EU (by alice)" ||
		rows[2] != "api 1 promote 60->65 step 12" {
		t.Errorf("event rows after the holds: %q", rows)
	}
	if r := a.run(t, "pause", "web"); r.code != 1 || !strings.Contains(r.stderr, "dwara pause: 409 Conflict: ") {
		t.Errorf("pause of a plain service: %s", r)
	}
	if r := a.run(t, "resume", "nope"); r.code != 1 || !strings.Contains(r.stderr, `dwara resume: 404 Not Found: service "nope" does not exist in generation 1`) {
		t.Errorf("resume of an unknown service: %s", r)
	}

	// Adopt publishes the weights in force; then there is nothing to adopt.
	if out := a.must(t, "adopt", "api"); out != "generation 2 created (adopt) by alice: adopt canary weights 35/65 of api\n" {
		t.Errorf("adopt printed %q", out)
	}
	g := a.current(t)
	if ws := splitWeights(t, g); g.Action != apiv1.ActionAdopt || !slices.Equal(ws, []int{35, 65}) {
		t.Errorf("adopted generation %+v, weights %v", g, ws)
	}
	if r := a.run(t, "adopt", "api", "-m", "again"); r.code != 1 || !strings.Contains(r.stderr, "dwara adopt: 409 Conflict: no transient weights to adopt") {
		t.Errorf("adopt with nothing to adopt: %s", r)
	}
	if out := a.must(t, "canary"); !regexp.MustCompile(`(?m)^api\s+running\s+35/65\s+60s\s+no requests\s+no requests$`).MatchString(out) {
		t.Errorf("canary after adopt:\n%s", out)
	}
	if n := a.count(t); n != 2 {
		t.Errorf("%d generations, want 2", n)
	}
}

func TestCanaryFormats(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		sec  float64
		want string
	}{
		{0.000850, "850µs"},
		{0.0123, "12.3ms"},
		{1.25, "1.25s"},
	} {
		if got := seconds(tt.sec); got != tt.want {
			t.Errorf("seconds(%v) = %q, want %q", tt.sec, got, tt.want)
		}
	}
	f := apiv1.CanaryFigures{Requests: 1200, Errors: 6, ErrorRate: 0.005, LatencyP99: 0.0123}
	if got := figuresText(f, false); got != "1200 req, 0.50% err, p99 12.3ms" {
		t.Errorf("figuresText = %q", got)
	}
	if got := figuresText(f, true); got != "1200 req, 0.50% err, p99 12.3ms, ttft p99 -" {
		t.Errorf("figuresText of a model group without a streamed answer = %q", got)
	}
	f.TTFTP99 = 0.21
	if got := figuresText(f, true); got != "1200 req, 0.50% err, p99 12.3ms, ttft p99 210.0ms" {
		t.Errorf("figuresText of a model group = %q", got)
	}
	if got := figuresText(f, false); got != "1200 req, 0.50% err, p99 12.3ms" {
		t.Errorf("figuresText of a service group with a TTFT = %q", got)
	}
}

// TestCachePurgeVerb: dwara cache purge SERVICE [--path-prefix P] calls
// the purge and prints what it removed (none: the test API reaches no
// proxy); a service without cache is the API's 409.
func TestCachePurgeVerb(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	spec := spectest.Canary(95, 5).Route("web", "/", "api-stable").Edit(func(s *config.Spec) {
		svc, _ := s.Service("web")
		svc.Cache = &config.Cache{MaxBytes: 1 << 20}
	})
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", spec.YAML()))
	if out := a.must(t, "cache", "purge", "web", "--path-prefix", "/img/"); out != "cache of web purged under /img/: 0 entries removed (generation 1)\n" {
		t.Errorf("cache purge printed %q", out)
	}
	if out := a.must(t, "cache", "purge", "web", "-o", "name"); out != "service/web\n" {
		t.Errorf("cache purge -o name printed %q", out)
	}
	if r := a.run(t, "cache", "purge", "api"); r.code != 1 || !strings.Contains(r.stderr, "409 Conflict") {
		t.Errorf("purge of a service without cache: %s", r)
	}
	if r := a.run(t, "cache", "web"); r.code != 2 {
		t.Errorf("cache without purge: %s", r)
	}
}
