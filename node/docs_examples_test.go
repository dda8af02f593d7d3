package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testdocs"
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
		"TestREADMEWalkthrough":   fencedBlocks(readmeSection(t, "Using the API with curl"), "sh"),
		"TestREADMEStartHere":     fencedBlocks(readmeSection(t, "Start here"), "sh"),
		"TestREADMESpecExample":   fencedBlocks(readmeSection(t, "The generation spec"), "yaml")[:1],
		"TestREADMECanaryExample": fencedBlocks(readmeSection(t, "Auto-canary analysis"), "yaml"),
		"TestDocsCanaryCalls":     canaryCallBlocks(t),
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
