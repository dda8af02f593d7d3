package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testdocs"
)

// readmeSection returns the section "## title" of the documentation
// (README.md or a page of docs/).
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	return testdocs.Section(t, "..", title)
}

// fencedBlocks returns the fenced blocks of text whose info string is lang,
// in order.
func fencedBlocks(text, lang string) []string {
	var blocks []string
	for {
		_, rest, ok := strings.Cut(text, "\n```"+lang+"\n")
		if !ok {
			return blocks
		}
		block, after, _ := strings.Cut(rest, "\n```\n")
		blocks = append(blocks, block+"\n")
		text = "\n" + after
	}
}

// demoServe is a `serve --demo` on free ports: the demo pools and the
// demo spec seeded as by startDemo, the API and the proxy.
type demoServe struct {
	*proc
	store          *db.Store
	stable, canary *demo.Pool
}

// startDemoServe starts a demoServe on a fresh database; token "" means an
// API without one.
func startDemoServe(t *testing.T, front, token string) *demoServe {
	t.Helper()
	store, url := dbtest.NewStore(t)
	pools, err := startDemoOn(t.Context(), store, []string{"127.0.0.1:0", "127.0.0.1:0"}, []string{"127.0.0.1:0"}, DefaultDemoPorts)
	for _, p := range pools {
		t.Cleanup(p.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, ServeConfig{Front: front, DatabaseURL: url, AdminToken: token})
	p.waitApplied(t, 1)
	return &demoServe{proc: p, store: store, stable: pools[0], canary: pools[1]}
}

// onPorts rewrites the README's addresses (the default listeners and the
// demo pools' fixed ports) to those of s.
func (s *demoServe) onPorts(script string) string {
	return strings.NewReplacer(
		"http://127.0.0.1:9090", "http://"+s.Admin,
		"http://127.0.0.1:8080", "http://"+s.Proxy,
		"127.0.0.1:9001", s.stable.Addrs[0],
		"127.0.0.1:9002", s.stable.Addrs[1],
		"127.0.0.1:9101", s.canary.Addrs[0],
	).Replace(script)
}

// scriptWait bounds a whole script of runScript. A script runs a dozen or
// more commands, each a process of its own (TestDocsCLI's dwara is this
// test binary), and on a machine running two suites at once one took 2-3 s:
// wait (30 s) was too short for the script of the CLI's verbs. Like wait,
// it only ends a hung script; a passing one never comes near it.
const scriptWait = 4 * wait

// runScript runs script with bash in dir, stopping at the first command
// that fails and treating an HTTP error answer of curl as a failure, and
// returns its stdout; the script is killed past scriptWait.
func runScript(t *testing.T, dir, script string, env ...string) string {
	t.Helper()
	prelude := "set -euo pipefail\ncurl() { command curl --fail-with-body \"$@\"; }\n"
	path := filepath.Join(dir, "walkthrough.sh")
	if err := os.WriteFile(path, []byte(prelude+script), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), scriptWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the README's commands failed: %v\nstdout:\n%s\nstderr:\n%s\nscript:\n%s", err, out, stderr, script)
	}
	return string(out)
}

// needTools skips the test when the README's tools are missing.
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"bash", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the README's walkthrough needs %s: %v", tool, err)
		}
	}
}

// get answers the status and body of a GET through the proxy.
func (s *demoServe) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := httpc.Get("http://" + s.Proxy + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// weightsOf returns the split weights of each service of g.
func weightsOf(t *testing.T, g apiv1.Generation) map[string][]int {
	t.Helper()
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		t.Fatal(err)
	}
	ws := map[string][]int{}
	for _, svc := range spec.Services {
		var w []int
		if svc.Split != nil {
			for _, tg := range svc.Split.Targets {
				w = append(w, tg.Weight)
			}
		}
		ws[svc.Name] = w
	}
	return ws
}

// TestREADMEStartHere runs the "Try it" commands of README's "Start here"
// against a `serve --demo` as `make run` starts it (no token).
func TestREADMEStartHere(t *testing.T) {
	needTools(t)
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		s := startDemoServe(t, front, "")
		section := readmeSection(t, "Start here")
		_, tryIt, ok := strings.Cut(section, "Try it:\n")
		blocks := fencedBlocks(tryIt, "sh")
		if !ok || len(blocks) == 0 {
			t.Fatal(`README's "Start here" has no "Try it:" commands`)
		}
		out := runScript(t, t.TempDir(), s.onPorts(blocks[0]))
		if !strings.Contains(out, "Set-Cookie: dwara_affinity=") || !regexp.MustCompile(`(?m)^pool=web-(stable|canary) `).MatchString(out) {
			t.Errorf("the demo's first answers lack the cookie or the pool:\n%s", out)
		}
		g, err := s.store.Current(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ws := weightsOf(t, g); g.ID != 2 || g.Action != apiv1.ActionFlip || !slices.Equal(ws["web"], []int{10, 90}) {
			t.Errorf("after Try it: generation %d (%s), weights %v; want 2, a flip of web to 10/90", g.ID, g.Action, ws)
		}
	})
}

// TestREADMEWalkthrough runs every command of README's "Using the API with
// curl" against a `serve --demo` with an admin token, twice in a row on the
// same database (as a reader running it again would), and checks what the
// section claims: the demo's services stay, api is added and edited, the
// JSON shown in its comments is what the API answers on a fresh database.
func TestREADMEWalkthrough(t *testing.T) {
	needTools(t)
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		const token = "walkthrough-token"
		s := startDemoServe(t, front, token)
		section := readmeSection(t, "Using the API with curl")
		blocks := fencedBlocks(section, "sh")
		if len(blocks) < 8 {
			t.Fatalf("the section has %d shell blocks; the walkthrough has at least 8", len(blocks))
		}
		script := s.onPorts(strings.Join(blocks, ""))
		// The event stream lasts until the reader ends it: here after 2 s
		// (curl's exit status 28).
		const events = `curl -sN "$DWARA/api/v1/events" -H "$AUTH"`
		if strings.Count(script, events) != 1 {
			t.Fatalf("the walkthrough does not read the event stream with %s once", events)
		}
		script = strings.Replace(script, events, `{ curl -sN --max-time 2 "$DWARA/api/v1/events" -H "$AUTH" || test $? = 28; }`, 1)

		dir := t.TempDir()
		out := runScript(t, dir, script, "DWARA_ADMIN_TOKEN="+token)

		// What the comments show is what a fresh database answers.
		for _, block := range blocks {
			for line := range strings.Lines(block) {
				claim, ok := strings.CutPrefix(strings.TrimSpace(line), "# ")
				if !ok || !json.Valid([]byte(claim)) {
					continue
				}
				if !slices.Contains(strings.Split(out, "\n"), s.onPorts(claim)) {
					t.Errorf("the walkthrough claims the answer %s; it printed:\n%s", claim, out)
				}
			}
		}
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^HTTP/1.1 201 Created\r$`),
			regexp.MustCompile(`(?m)^Location: /api/v1/generations/2\r$`),
			regexp.MustCompile(`(?m)^pool=web-(stable|canary) endpoint=\S+ generation=2 path=/api/$`),
			regexp.MustCompile(`(?m)^pool=web-(stable|canary) endpoint=\S+ generation=2 path=/$`),
			regexp.MustCompile(`(?m)^generation 4: api at 80/20$`),
			regexp.MustCompile(`(?m)^: connected$`), // the event stream's first line
		} {
			if !want.MatchString(out) {
				t.Errorf("the walkthrough's output lacks %s:\n%s", want, out)
			}
		}
		check := func(t *testing.T, wantID int64) {
			t.Helper()
			g, err := s.store.Current(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ws := weightsOf(t, g)
			if g.ID != wantID || g.Action != apiv1.ActionRollback || !slices.Equal(ws["api"], []int{80, 20}) ||
				!slices.Equal(ws["web"], []int{90, 10}) || !slices.Equal(ws["shop"], []int{90, 10}) {
				t.Errorf("active generation %d (%s) with weights %v; want %d, a rollback to api 80/20 beside web and shop 90/10",
					g.ID, g.Action, ws, wantID)
			}
			for _, path := range []string{"/", "/shop/", "/api/"} {
				if code, body := s.get(t, path); code != http.StatusOK || !strings.HasPrefix(body, "pool=web-") {
					t.Errorf("GET %s through the proxy: %d %s; the walkthrough keeps web and shop and adds api", path, code, body)
				}
			}
		}
		check(t, 7)
		if g, err := s.store.Get(t.Context(), 2); err != nil || g.Author != "alice" {
			t.Errorf("generation 2: %+v, %v; want alice's publish", g, err)
		}

		// Again, on top of what the first run left: 6 more generations.
		runScript(t, dir, script, "DWARA_ADMIN_TOKEN="+token)
		check(t, 13)
	})
}

// TestREADMESpecExample checks that the spec example of README's "The
// generation spec" is a valid spec, and that what it says of ttl_s is what
// the decoder does: 0 or absent means 3600.
func TestREADMESpecExample(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "The generation spec")
	blocks := fencedBlocks(section, "yaml")
	if len(blocks) == 0 {
		t.Fatal("no YAML example")
	}
	spec, err := config.Parse([]byte(blocks[0]))
	if err != nil {
		t.Fatalf("the README's spec example: %v", err)
	}
	if !strings.Contains(blocks[0], "ttl_s: 3600             # 1..2592000; 0 or absent means 3600\n") {
		t.Error("the example does not say that ttl_s 0 or absent means 3600")
	}
	for _, ttl := range []string{"ttl_s: 0", ""} {
		doc := strings.Replace(blocks[0], "ttl_s: 3600", ttl, 1)
		s, err := config.Parse([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", ttl, err)
		}
		if got := s.Services[0].Sticky.TTLSeconds; got != 3600 {
			t.Errorf("%q: ttl_s = %d, want 3600", ttl, got)
		}
	}
	if spec.Services[0].Sticky.TTLSeconds != 3600 {
		t.Errorf("ttl_s = %d", spec.Services[0].Sticky.TTLSeconds)
	}
}
