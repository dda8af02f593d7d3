package config

import (
	"strings"
	"testing"
)

const matchSpec = `upstreams:
  - {name: api-stable, endpoints: ["127.0.0.1:9001"]}
  - {name: api-canary, endpoints: ["127.0.0.1:9101"]}
services:
  - name: api
    base_path: /v1
    split:
      targets:
        - {upstream: api-stable, weight: 95}
        - {upstream: api-canary, weight: 5}
      match:
%s
`

func matchRules(rules string) []byte {
	return []byte(strings.Replace(matchSpec, "%s", rules, 1))
}

// Match rules decode with their conditions and survive a clone apart.
func TestMatchRulesParse(t *testing.T) {
	t.Parallel()
	spec, err := Parse(matchRules(`        - name: beta
          headers: {X-User-Group: {exact: beta}, X-Region: {prefix: eu-}}
          cookies: {plan: {regex: "^pro"}}
          target: api-canary`))
	if err != nil {
		t.Fatal(err)
	}
	r := spec.Services[0].Split.Match[0]
	if r.Name != "beta" || r.Target != "api-canary" || *r.Headers["X-User-Group"].Exact != "beta" || *r.Headers["X-Region"].Prefix != "eu-" || *r.Cookies["plan"].Regex != "^pro" {
		t.Errorf("rule %+v", r)
	}
	c := spec.Clone()
	delete(c.Services[0].Split.Match[0].Headers, "X-Region")
	if len(spec.Services[0].Split.Match[0].Headers) != 2 {
		t.Error("a clone's rule shares its conditions with the original")
	}
}

func TestMatchRulesValidate(t *testing.T) {
	t.Parallel()
	const p = "services[0].split.match"
	for _, tt := range []struct {
		name  string
		rules string
		want  []problem
	}{
		{"unknown target", `        - {name: beta, headers: {X-G: {exact: b}}, target: api-canry}`,
			[]problem{{p + "[0].target", `unknown target "api-canry"; the split's targets are "api-stable", "api-canary"; did you mean "api-canary"?`, ""}}},
		{"bad regex", `        - {name: beta, cookies: {plan: {regex: "(pro"}}, target: api-canary}`,
			[]problem{{p + "[0].cookies.plan.regex", "is not an RE2 regular expression: error parsing regexp: missing closing )", ""}}},
		{"duplicate names", `        - {name: beta, headers: {X-G: {exact: b}}, target: api-canary}
        - {name: beta, headers: {X-H: {exact: b}}, target: api-stable}`,
			[]problem{{p + "[1].name", `duplicate rule name "beta" (also ` + p + `[0])`, ""}}},
		{"no condition", `        - {name: all, target: api-canary}`,
			[]problem{{p + "[0]", "needs at least one condition", ""}}},
		{"two kinds", `        - {name: beta, headers: {X-G: {exact: b, prefix: c}}, target: api-canary}`,
			[]problem{{p + "[0].headers.X-G", "give exactly one of exact, prefix and regex", ""}}},
		{"bad field name", `        - {name: beta, headers: {"X G": {exact: b}}, target: api-canary}`,
			[]problem{{p + "[0].headers.X G", "must be an HTTP field name", ""}}},
		{"same field twice", `        - {name: beta, headers: {x-g: {exact: b}, X-G: {exact: c}}, target: api-canary}`,
			[]problem{{p + "[0].headers.x-g", `names the same field as "X-G"`, ""}}},
		{"empty prefix", `        - {name: beta, headers: {X-G: {prefix: ""}}, target: api-canary}`,
			[]problem{{p + "[0].headers.X-G.prefix", "must not be empty", ""}}},
		{"unknown field", `        - {name: beta, header: {X-G: {exact: b}}, target: api-canary}`,
			[]problem{{p + "[0].header", "unknown field; allowed: name, headers, cookies, target", ""}, {p + "[0]", "needs at least one condition", ""}}},
		{"bad name", `        - {name: "Beta!", headers: {X-G: {exact: b}}, target: api-canary}`,
			[]problem{{p + "[0].name", `invalid rule name "Beta!"`, ""}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(matchRules(tt.rules))
			checkProblems(t, err, tt.want...)
		})
	}
}
