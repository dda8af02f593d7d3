package cli

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

func strp(s string) *string { return &s }

// rulesSpecYAML is spectest.Canary(stable, canary) with a service "web"
// on one upstream beside it, and rules as api's match list.
func rulesSpecYAML(stable, canary int, rules ...config.MatchRule) string {
	return spectest.Canary(stable, canary).Route("web", "/", "api-stable").Edit(func(s *config.Spec) {
		svc, _ := s.Service("api")
		svc.Split.Match = rules
	}).YAML()
}

var (
	cliBeta = config.MatchRule{Name: "beta", Headers: map[string]config.StringMatch{"X-User-Group": {Exact: strp("beta")}}, Target: "api-canary"}
	cliPro  = config.MatchRule{Name: "pro", Cookies: map[string]config.StringMatch{"plan": {Regex: strp("^pro")}},
		Headers: map[string]config.StringMatch{"X-Env": {Prefix: strp("eu-")}}, Target: "api-stable"}
)

// TestGetServices shows the match rules of the active generation's
// services in every output of `dwara get services`.
func TestGetServices(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", rulesSpecYAML(90, 10, cliBeta, cliPro)))

	out := a.must(t, "get", "services")
	for _, want := range []string{
		`(?m)^generation 1$`,
		`(?m)^SERVICE\s+ROUTE\s+ROUTING\s+RULES$`,
		`(?m)^api\s+/v1\s+split api-stable 90 / api-canary 10\s+beta, pro$`,
		`(?m)^web\s+/\s+upstream api-stable\s+-$`,
		`(?m)^SERVICE\s+#\s+RULE\s+CONDITIONS\s+TARGET$`,
		`(?m)^api\s+1\s+beta\s+header X-User-Group = beta\s+api-canary$`,
		`(?m)^api\s+2\s+pro\s+header X-Env starts with eu- and cookie plan ~ \^pro\s+api-stable$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("get services lacks %s:\n%s", want, out)
		}
	}
	if strings.Index(out, " beta ") > strings.Index(out, " pro ") {
		t.Errorf("the rules are not in the order they are checked:\n%s", out)
	}

	wide := a.must(t, "get", "services", "-o", "wide")
	if !regexp.MustCompile(`(?m)^SERVICE\s+ROUTE\s+ROUTING\s+RULES\s+STICKY\s+OVERRIDE\s+MIRROR\s+MANAGED BY$`).MatchString(wide) ||
		!regexp.MustCompile(`(?m)^api\s+1\s+beta\s+header X-User-Group = beta\s+api-canary$`).MatchString(wide) {
		t.Errorf("get services -o wide:\n%s", wide)
	}

	// One service by name; the others are left out.
	one := a.must(t, "get", "services", "api")
	if strings.Contains(one, "upstream api-stable") || !strings.Contains(one, "header X-User-Group = beta") {
		t.Errorf("get services api:\n%s", one)
	}
	if got := a.must(t, "get", "services", "-o", "name"); got != "service/api\nservice/web\n" {
		t.Errorf("get services -o name = %q", got)
	}

	// JSON and YAML: the services as the spec has them, rules and all.
	for _, format := range []string{"json", "yaml"} {
		out := a.must(t, "get", "services", "api", "-o", format)
		js := []byte(out)
		if format == "yaml" {
			var err error
			if js, err = yaml.YAMLToJSON(js); err != nil {
				t.Fatalf("-o yaml is not YAML: %v\n%s", err, out)
			}
		}
		var list struct {
			Generation int64            `json:"generation"`
			Services   []config.Service `json:"services"`
		}
		if err := json.Unmarshal(js, &list); err != nil {
			t.Fatalf("-o %s: %v\n%s", format, err, out)
		}
		if list.Generation != 1 || len(list.Services) != 1 || list.Services[0].Split == nil || len(list.Services[0].Split.Match) != 2 {
			t.Fatalf("-o %s = %+v", format, list)
		}
		r := list.Services[0].Split.Match[1]
		if r.Name != "pro" || r.Target != "api-stable" || r.String() != cliPro.String() {
			t.Errorf("-o %s: rule 2 = %+v, want %+v", format, r, cliPro)
		}
	}

	r := a.run(t, "get", "services", "apx")
	if r.code != 1 || !strings.Contains(r.stderr, `service "apx" is not in the active generation (1); did you mean "api"?`) {
		t.Errorf("get services apx: %s", r)
	}
	if r := a.run(t, "get", "upstreams"); r.code != 2 || !strings.Contains(r.stderr, "give what to get: services [SERVICE...]") {
		t.Errorf("get upstreams: %s", r)
	}
}

// TestDiffMatchRulesText shows a rule change in `dwara diff`: the MOVED
// column says that matches decide, and -o wide lists each rule change.
func TestDiffMatchRulesText(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	a.must(t, "apply", "-f", writeSpec(t, "1.yaml", rulesSpecYAML(90, 10, cliBeta, cliPro)))
	betaStable := cliBeta
	betaStable.Target = "api-stable"
	a.must(t, "apply", "-f", writeSpec(t, "2.yaml", rulesSpecYAML(80, 20, cliPro, betaStable)))

	out := a.must(t, "diff")
	for _, want := range []string{
		`(?m)^api\s+modified\s+10\.0% of weighted \+ matches decide\s+weights api-stable 90->80; weights api-canary 10->20; ` +
			`match rule pro reordered \(position 2->1\); match rule beta modified \(target api-canary->api-stable; position 1->2\)$`,
		`(?m)^web\s+unchanged\s+0\.0%\s*$`,
		`(?m)^matches decide: the requests a match rule takes go where the rule says`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("diff lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "MATCH RULE") {
		t.Errorf("diff without -o wide has the rules table:\n%s", out)
	}
	wide := a.must(t, "diff", "-o", "wide")
	for _, want := range []string{
		`(?m)^SERVICE\s+MATCH RULE\s+CHANGE\s+DETAILS$`,
		`(?m)^api\s+pro\s+reordered\s+position 2->1$`,
		`(?m)^api\s+beta\s+modified\s+target api-canary->api-stable; position 1->2$`,
	} {
		if !regexp.MustCompile(want).MatchString(wide) {
			t.Errorf("diff -o wide lacks %s:\n%s", want, wide)
		}
	}
	// The dry run of a rule removed says so as the diff does.
	dry := a.must(t, "apply", "--dry-run", "-f", writeSpec(t, "3.yaml", rulesSpecYAML(80, 20, cliPro)))
	if !regexp.MustCompile(`(?m)^api\s+modified\s+0\.0% of weighted \+ matches decide\s+match rule beta removed \(header X-User-Group = beta -> api-stable\)$`).MatchString(dry) {
		t.Errorf("apply --dry-run:\n%s", dry)
	}
	// Rules kept, weights changed: the share is of the weighted requests.
	a.must(t, "weights", "api", "api-stable=70", "api-canary=30")
	if out := a.must(t, "diff"); !regexp.MustCompile(`(?m)^api\s+modified\s+10\.0% of weighted\s+weights`).MatchString(out) {
		t.Errorf("diff of a weights change beside rules:\n%s", out)
	}
}
