package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/client/cli"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/httproute"
	"github.com/dwara/dwara/internal/testdocs"
	"sigs.k8s.io/yaml"
)

// Every fenced block of the documentation (README.md, docs/*.md) is one of:
//
//   - run by a test: README.md's blocks are listed in readmeRunBy (its
//     "Start here" is not marked, cmd/dwara's banner test reads it as it
//     is); a block of docs/ says so with <!-- example: run by TestName -->;
//   - a whole spec (YAML or JSON with top-level upstreams or services),
//     parsed and validated here with config.Parse;
//   - a spec fragment that fragmentSpec embeds in a minimal spec, validated
//     the same way;
//   - an API answer, <!-- example: answer: TYPE -->, decoded strictly into
//     the apiv1 type named in answerTypes;
//   - marked as deliberately not run: <!-- example: not run: REASON -->, or
//     <!-- example: fragment --> for a fragment no minimal spec can hold.
//
// A block that is none of these fails TestDocsExamples, so a new example
// gets a test or says why it has none.

// readmeRunBy names the test that runs each fenced block of README.md, by
// the block's first line.
var readmeRunBy = map[string]string{
	"make run    # builds bin/dwara and runs `dwara serve --demo`": "TestBannerInREADME", // make run's banner; make test is the suite itself
	"dwara is running":                   "TestBannerInREADME",
	"curl -si http://127.0.0.1:8080/   ": "TestREADMEStartHere",
}

// answerTypes are the API answers an "answer:" marker may name.
var answerTypes = map[string]func() any{
	"GatewayList": func() any { return new(apiv1.GatewayList) },
}

// docsRunBy returns, for the tests of this package that run documentation
// blocks, the blocks each one runs, so a "run by" marker naming one of them
// is checked to be true.
func docsRunBy(t *testing.T) map[string][]string {
	return map[string][]string{
		"TestREADMEWalkthrough":    fencedBlocks(readmeSection(t, "Using the API with curl"), "sh"),
		"TestREADMEStartHere":      fencedBlocks(readmeSection(t, "Start here"), "sh"),
		"TestREADMESpecExample":    fencedBlocks(readmeSection(t, "The generation spec"), "yaml")[:1],
		"TestREADMECanaryExample":  fencedBlocks(readmeSection(t, "Auto-canary analysis"), "yaml"),
		"TestDocsCanaryCalls":      canaryCallBlocks(t),
		"TestDocsHTTPRouteExample": {httpRouteExample(t)},
		"TestDocsCLI":              append(fencedBlocks(readmeSection(t, "Command-line client"), "sh"), fencedBlocks(readmeSection(t, "Command-line client"), "yaml")...),
	}
}

// testFuncs returns the names of every test function of the module.
func testFuncs(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(data, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// wholeSpec reports whether a YAML or JSON block is a whole spec.
func wholeSpec(b testdocs.Block) bool {
	switch b.Lang {
	case "yaml":
		return regexp.MustCompile(`(?m)^(upstreams|services):`).MatchString(b.Text)
	case "json":
		return strings.HasPrefix(strings.TrimSpace(b.Text), "{") && regexp.MustCompile(`^\{\s*"(upstreams|services)"`).MatchString(strings.TrimSpace(b.Text))
	}
	return false
}

// The minimal spec a fragment is embedded in: %[1]s is an upstream's field
// (indented 4), %[2]s a service's (indented 4).
const fragmentFrame = `upstreams:
  - name: api-stable
    endpoints: ["127.0.0.1:9001"]
%[1]s  - name: api-canary
    endpoints: ["127.0.0.1:9101"]
services:
  - name: api
    base_path: /
%[2]s`

// The split of a canary group, for a fragment of canary_analysis' fields
// (indented 8).
const canaryFrame = `    split:
      targets:
        - {upstream: api-stable, weight: 90}
        - {upstream: api-canary, weight: 10}
      canary_analysis:
        enabled: true
`

// fragmentSpec embeds a YAML fragment in a minimal spec by where its first
// field belongs (its name and indentation); ok is false when it knows no
// place for it.
func fragmentSpec(text string) (spec string, ok bool) {
	var first string
	for line := range strings.Lines(text) {
		if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
			first = strings.TrimRight(line, "\n")
			break
		}
	}
	field, _, _ := strings.Cut(strings.TrimSpace(first), ":")
	indent := len(first) - len(strings.TrimLeft(first, " "))
	upstream := map[string]bool{"health_check": true, "balancer": true, "endpoints": true}
	switch {
	case indent == 4 && upstream[field]:
		return fmt.Sprintf(fragmentFrame, text, "    upstream: api-stable\n"), true
	case indent == 4:
		return fmt.Sprintf(fragmentFrame, "", text), true
	case indent == 8:
		frame := canaryFrame
		// A group needs its promote and rollback conditions; the
		// fragment's own, when it has them, take their place.
		for _, cond := range []string{"promote", "rollback"} {
			if !regexp.MustCompile(`(?m)^        ` + cond + `:`).MatchString(text) {
				frame += "        " + cond + ": {metric: error_rate, threshold: " + map[string]string{"promote": "0.01", "rollback": "0.05"}[cond] + "}\n"
			}
		}
		return fmt.Sprintf(fragmentFrame, "", frame+text), true
	}
	return "", false
}

// TestDocsExamples walks every fenced block of the documentation and
// checks it as the comment above says: the specs and fragments parse and
// validate, the answers decode strictly, the blocks said to be run by a
// test are (for this package's tests, that test reads that very block),
// and every other block is marked as deliberately not run.
func TestDocsExamples(t *testing.T) {
	t.Parallel()
	blocks := testdocs.FencedBlocks(t, "..")
	if len(blocks) < 30 {
		t.Fatalf("the documentation has %d fenced blocks; it had 38 when this test was written", len(blocks))
	}
	funcs := testFuncs(t)
	runBy := docsRunBy(t)
	readmeSeen := map[string]bool{}
	for _, b := range blocks {
		firstLine, _, _ := strings.Cut(b.Text, "\n")
		marker := b.Marker
		if b.File == "README.md" && marker == "" {
			for prefix, test := range readmeRunBy {
				if strings.HasPrefix(strings.TrimSpace(firstLine), prefix) {
					marker, readmeSeen[prefix] = "run by "+test, true
				}
			}
		}
		switch {
		case strings.HasPrefix(marker, "run by "):
			test := strings.TrimPrefix(marker, "run by ")
			if !funcs[test] {
				t.Errorf("%s: %q: no test of the module is named %s", b, marker, test)
			} else if runs, ok := runBy[test]; ok && !slices.Contains(runs, b.Text) {
				t.Errorf("%s: %q, but %s does not read this block (it reads %d others)", b, marker, test, len(runs))
			}
			if wholeSpec(b) {
				checkSpec(t, b, b.Text)
			}
		case strings.HasPrefix(marker, "not run:"):
			if strings.TrimSpace(strings.TrimPrefix(marker, "not run:")) == "" {
				t.Errorf("%s: %q says no reason", b, marker)
			}
		case marker == "fragment":
			if b.Lang != "yaml" && b.Lang != "json" {
				t.Errorf("%s: a %q block marked as a spec fragment", b, b.Lang)
			}
			if _, ok := fragmentSpec(b.Text); ok && b.Lang == "yaml" {
				t.Errorf("%s: marked as a fragment, but it fits a minimal spec: drop the marker so it is checked", b)
			}
		case strings.HasPrefix(marker, "answer:"):
			name := strings.TrimSpace(strings.TrimPrefix(marker, "answer:"))
			newV, ok := answerTypes[name]
			if !ok {
				t.Errorf("%s: %q: no such answer type (answerTypes)", b, marker)
				continue
			}
			dec := json.NewDecoder(strings.NewReader(b.Text))
			dec.DisallowUnknownFields()
			if err := dec.Decode(newV()); err != nil {
				t.Errorf("%s: the answer does not decode as %s: %v", b, name, err)
			}
		case marker != "":
			t.Errorf("%s: unknown marker %q (run by TestName, not run: REASON, fragment, answer: TYPE)", b, marker)
		case wholeSpec(b):
			checkSpec(t, b, b.Text)
		case b.Lang == "yaml":
			spec, ok := fragmentSpec(b.Text)
			if !ok {
				t.Errorf("%s: a YAML fragment with no place in a minimal spec: teach fragmentSpec, or mark it <!-- example: fragment -->", b)
				continue
			}
			checkSpec(t, b, spec)
		default:
			t.Errorf("%s (under %q, starting %q) is run by no test: run it, or mark it <!-- example: not run: REASON -->",
				b, b.Heading, firstLine)
		}
	}
	for prefix, test := range readmeRunBy {
		if !readmeSeen[prefix] {
			t.Errorf("README.md has no block starting %q (%s runs it): update readmeRunBy", prefix, test)
		}
	}
}

// checkSpec fails the test when spec does not parse and validate.
func checkSpec(t *testing.T, b testdocs.Block, spec string) {
	t.Helper()
	if _, err := config.Parse([]byte(spec)); err != nil {
		t.Errorf("%s: the example is not a valid spec: %v\nchecked as:\n%s", b, err, spec)
	}
}

// canaryCallBlocks returns the blocks of docs/canary.md marked as run by
// TestDocsCanaryCalls.
func canaryCallBlocks(t *testing.T) []string {
	var out []string
	for _, b := range testdocs.FencedBlocks(t, "..") {
		if b.File == "docs/canary.md" && b.Marker == "run by TestDocsCanaryCalls" {
			out = append(out, b.Text)
		}
	}
	return out
}

// TestDocsCanaryCalls runs the curl blocks of docs/canary.md marked as
// run by it, against a serve whose spec is the section's first example (a
// canary group api, in a minimal spec), and checks the status of every
// call: 200 for reads, pause and resume; 409 for adopt, as the block says
// of a group whose weights the controller has not changed.
func TestDocsCanaryCalls(t *testing.T) {
	needTools(t)
	t.Parallel()
	blocks := canaryCallBlocks(t)
	if len(blocks) < 2 {
		t.Fatalf("docs/canary.md has %d blocks run by TestDocsCanaryCalls; want the group calls and the exposure calls", len(blocks))
	}
	first := fencedBlocks(readmeSection(t, "Auto-canary analysis"), "yaml")[0]
	spec, ok := fragmentSpec(first)
	if !ok {
		t.Fatal("the first example of Auto-canary analysis is no fragment of a service")
	}
	s, err := config.Parse([]byte(spec))
	if err != nil {
		t.Fatalf("the first example of Auto-canary analysis: %v", err)
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// An API without a token (as make run's): $AUTH is a harmless header.
	srv := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	publish(t, srv.Admin, js)

	// Each call prints its answer then its status on a line of its own.
	script := "export DWARA=http://" + srv.Admin + "\nexport AUTH='Accept: application/json'\n" +
		"curl() { command curl -sS -w '\\nstatus %{http_code}\\n' \"$@\"; }\n" + strings.Join(blocks, "")
	out := runScript(t, t.TempDir(), script)
	var statuses []string
	for line := range strings.Lines(out) {
		if code, ok := strings.CutPrefix(strings.TrimSpace(line), "status "); ok {
			statuses = append(statuses, code)
		}
	}
	want := []string{"200", "200", "200", "200", "409", "200", "200"}
	if !slices.Equal(statuses, want) {
		t.Errorf("the calls answered %v, want %v (canary, events, pause, resume, adopt; exposures, summary):\n%s", statuses, want, out)
	}
	var list apiv1.CanaryList
	call(t, "GET", "http://"+srv.Admin+"/api/v1/canary", nil, &list)
	if len(list.Items) != 1 || list.Items[0].Service != "api" || list.Items[0].State != apiv1.CanaryRunning {
		t.Errorf("after the calls (pause, then resume): %+v; want api running", list.Items)
	}
	if !bytes.Contains([]byte(out), []byte(`"paused"`)) {
		t.Errorf("the pause call's answer does not show the group paused:\n%s", out)
	}
}

// TestDocsCLIProcess is not a test: it is the `dwara` of the shell
// blocks TestDocsCLI runs, this test binary started again with
// DWARA_DOCS_CLI=1, running the client as cmd/dwara's main does for a
// client verb.
func TestDocsCLIProcess(t *testing.T) {
	if os.Getenv("DWARA_DOCS_CLI") != "1" {
		t.Skip("the dwara of TestDocsCLI's shell blocks")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(cli.Run(context.Background(), args, cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv}))
}

// dwaraFunc is the shell function that makes `dwara` this test binary's
// TestDocsCLIProcess.
func dwaraFunc(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("dwara() { DWARA_DOCS_CLI=1 %q -test.run='^TestDocsCLIProcess$' -- \"$@\"; }\n", bin)
}

// toolsBlocks returns the sh blocks of docs/tools.md's "Command-line
// client" and the YAML of the configuration file.
func toolsBlocks(t *testing.T) (sh []string, configFile string) {
	t.Helper()
	section := readmeSection(t, "Command-line client")
	sh = fencedBlocks(section, "sh")
	yamls := fencedBlocks(section, "yaml")
	if len(sh) != 2 || len(yamls) != 1 {
		t.Fatalf("the Command-line client section has %d sh and %d yaml blocks; want the contexts, the verbs and the file", len(sh), len(yamls))
	}
	return sh, yamls[0]
}

// normalizeCLI makes the varying parts of the client's output (figures
// with a unit, times, counts of requests) comparable, and collapses runs
// of spaces.
func normalizeCLI(s string) string {
	for _, r := range []struct{ re, to string }{
		{`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`, "TIME"},
		{`\b\d+(\.\d+)?(µs|ms|s)\b`, "DURATION"},
		{`\b\d+(\.\d+)?%`, "N%"},
		{`\b\d+ req\b`, "N req"},
		{`\b200x\d+\b`, "200xN"},
		{` +`, " "},
	} {
		s = regexp.MustCompile(r.re).ReplaceAllString(s, r.to)
	}
	return strings.TrimSpace(s)
}

// claimedOutput returns the comment lines that follow each command of a
// shell block: what the block says the commands print.
func claimedOutput(block string) []string {
	var claims []string
	afterCommand := false
	for line := range strings.Lines(block) {
		line = strings.TrimRight(line, "\n")
		claim, isComment := strings.CutPrefix(line, "#")
		switch {
		case isComment && afterCommand:
			claims = append(claims, strings.TrimPrefix(claim, " "))
		case isComment:
		default:
			afterCommand = strings.TrimSpace(line) != "" && !strings.HasSuffix(line, "\\")
		}
	}
	return claims
}

// TestDocsCLI runs the command-line client's blocks of docs/tools.md with
// bash, `dwara` being the client: the contexts block in an empty home
// (its last line, a call through the example's unreachable prod API,
// left out), whose file must then be the one the section shows; and the
// verbs block against a `serve --demo` with an admin token, run by alice,
// with gen.yaml the demo's services and api (the spec of tools_gen.yaml
// below), where every output line the block shows is printed.
func TestDocsCLI(t *testing.T) {
	needTools(t)
	t.Parallel()
	sh, configFile := toolsBlocks(t)

	t.Run("contexts", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		script, last, ok := strings.Cut(strings.TrimRight(sh[0], "\n"), "\ndwara --context prod canary")
		if !ok || strings.Count(last, "\n") > 0 {
			t.Fatalf("the contexts block does not end with a call through prod:\n%s", sh[0])
		}
		// The file the section shows is the one its first command writes.
		first, rest, ok := strings.Cut(script, "\ndwara config set-context local")
		if !ok {
			t.Fatalf("the contexts block does not add a context local after its first:\n%s", sh[0])
		}
		env := []string{"HOME=" + home, "XDG_CONFIG_HOME=", "DWARA_CONFIG=", "USER=alice"}
		run := func(script string) string {
			return runScript(t, home, dwaraFunc(t)+"exec 2>&1\n"+strings.ReplaceAll(script, "/home/alice", home)+"\n", env...)
		}
		out := run(first)
		got, err := os.ReadFile(filepath.Join(home, ".config", "dwara", "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		out += run("dwara config set-context local" + rest)
		for _, claim := range []string{
			`context "prod" created in ` + home + `/.config/dwara/config.yaml`,
			"local",
		} {
			if !slices.Contains(strings.Split(out, "\n"), claim) {
				t.Errorf("the contexts block claims %q; it printed:\n%s", claim, out)
			}
		}
		var want, have any
		if err := yaml.Unmarshal([]byte(configFile), &want); err != nil {
			t.Fatal(err)
		}
		// The section's file has its paths relative to itself; the CLI
		// writes the absolute ones the shell expanded ~ to.
		for _, c := range want.(map[string]any)["contexts"].(map[string]any) {
			for _, k := range []string{"token-file", "certificate-authority"} {
				if p, ok := c.(map[string]any)[k].(string); ok && !filepath.IsAbs(p) {
					c.(map[string]any)[k] = filepath.Join(home, ".config", "dwara", p)
				}
			}
		}
		if err := yaml.Unmarshal(got, &have); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, have) {
			t.Errorf("after the contexts block the file is\n%s\nthe section shows\n%s", got, configFile)
		}
	})

	t.Run("verbs", func(t *testing.T) {
		t.Parallel()
		const token = "cli-token"
		s := startDemoServe(t, "", token)
		dir := t.TempDir()
		gen := s.onPorts(toolsGenYAML)
		spec, err := config.Parse([]byte(gen))
		if err != nil {
			t.Fatal(err)
		}
		js, _ := json.Marshal(spec)
		for name, data := range map[string][]byte{"gen.yaml": []byte(gen), "spec.json": js} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		script := s.onPorts(sh[1])
		// The calls the block says are refused on this state.
		for _, refused := range []string{`dwara canary promote shop -m "looks fine"`, `dwara adopt shop -m "keep it off"`} {
			if strings.Count(script, "\n"+refused) != 1 {
				t.Fatalf("the verbs block has no %s", refused)
			}
			script = strings.Replace(script, "\n"+refused, "\n! "+refused, 1)
		}
		out := runScript(t, dir, dwaraFunc(t)+"exec 2>&1\n"+script,
			"DWARA_API_URL=http://"+s.Admin, "DWARA_ADMIN_TOKEN="+token, "USER=alice", "HOME="+dir, "XDG_CONFIG_HOME=", "DWARA_CONFIG=")
		var lines []string
		for line := range strings.Lines(out) {
			lines = append(lines, normalizeCLI(line))
		}
		claims := claimedOutput(sh[1])
		if len(claims) < 10 {
			t.Fatalf("the verbs block shows %d output lines; it had 20 when this test was written", len(claims))
		}
		for _, claim := range claims {
			if !slices.Contains(lines, normalizeCLI(s.onPorts(claim))) {
				t.Errorf("the verbs block claims the line %q; it printed:\n%s", claim, out)
			}
		}
	})
}

// toolsGenYAML is the gen.yaml of docs/tools.md's verbs: the demo's web and
// shop (shop with a response cache), and api under /v1 at 90/10 with a
// beta rule and an override header, over the demo's pools.
const toolsGenYAML = `upstreams:
  - {name: web-stable, endpoints: ["127.0.0.1:9001", "127.0.0.1:9002"]}
  - {name: web-canary, endpoints: ["127.0.0.1:9101"]}
  - {name: api-stable, endpoints: ["127.0.0.1:9001", "127.0.0.1:9002"]}
  - {name: api-canary, endpoints: ["127.0.0.1:9101"]}
services:
  - name: web
    base_path: /
    split:
      targets:
        - {upstream: web-stable, weight: 90}
        - {upstream: web-canary, weight: 10}
    sticky: {cookie: dwara_affinity, ttl_s: 3600}
  - name: shop
    base_path: /shop
    cache: {max_bytes: 16777216}
    split:
      targets:
        - {upstream: web-stable, weight: 90}
        - {upstream: web-canary, weight: 10}
      canary_analysis:
        enabled: true
        window_seconds: 30
        step: 10
        min_requests: 50
        cooldown_seconds: 10
        promote: {metric: error_rate, threshold: 0.01}
        rollback: {metric: error_rate, threshold: 0.05}
  - name: api
    base_path: /v1
    override: {header: X-Dwara-Branch}
    split:
      targets:
        - {upstream: api-stable, weight: 90}
        - {upstream: api-canary, weight: 10}
      match:
        - name: beta
          headers: {X-User-Group: {exact: beta}}
          target: api-canary
`

// httpRouteExample returns the HTTPRoute docs/integrations.md shows for
// the demo's web.
func httpRouteExample(t *testing.T) string {
	t.Helper()
	for _, b := range fencedBlocks(readmeSection(t, "Gateway API"), "yaml") {
		if strings.Contains(b, "kind: HTTPRoute\n") && strings.Contains(b, "  name: web\n") {
			return b
		}
	}
	t.Fatal(`docs/integrations.md's "Gateway API" has no HTTPRoute of web`)
	return ""
}

// TestDocsHTTPRouteExample checks that the HTTPRoute docs/integrations.md
// shows for the demo's web is what the export makes of it.
func TestDocsHTTPRouteExample(t *testing.T) {
	t.Parallel()
	spec, err := config.Parse([]byte(DemoSpec(DefaultDemoPorts.Addrs())))
	if err != nil {
		t.Fatal(err)
	}
	routes, _, err := httproute.Export(spec, []string{"web"}, httproute.ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := yaml.Unmarshal([]byte(httpRouteExample(t)), &want); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(routes, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the export of the demo's web is\n%s\ndocs/integrations.md shows\n%s", routes, httpRouteExample(t))
	}
}
