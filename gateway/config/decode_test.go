package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestParseExample(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		file  string
		parse func([]byte) (*Spec, error)
	}{
		{"yaml via Parse", "testdata/example.yaml", Parse},
		{"yaml via ParseAs", "testdata/example.yaml", parseYAML},
		{"json via Parse", "testdata/example.json", Parse},
		{"json via ParseAs", "testdata/example.json", parseJSONFormat},
		{"json read as yaml", "testdata/example.json", parseYAML},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.parse(readFile(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if want := exampleSpec(); !reflect.DeepEqual(got, want) {
				t.Errorf("parsed spec:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

// minimal is the smallest valid spec, in JSON, with room to vary one part.
func minimal(target string) string {
	return `{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"]}, {"name": "b", "endpoints": ["10.0.0.2:80"]}],
		"services": [{"name": "s", "split": {"targets": [{"upstream": "a", "weight": 3}, ` + target + `]}}]}`
}

func TestParseTargetWeight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		target string
		want   int
	}{
		{"absent weight is 1", `{"upstream": "b"}`, 1},
		{"null weight is 1", `{"upstream": "b", "weight": null}`, 1},
		{"explicit zero stays 0", `{"upstream": "b", "weight": 0}`, 0},
		{"explicit weight", `{"upstream": "b", "weight": 7}`, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse([]byte(minimal(tt.target)))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Services[0].Split.Targets[1].Weight; got != tt.want {
				t.Errorf("weight = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestParseYAMLWeights(t *testing.T) {
	t.Parallel()
	in := `
upstreams:
  - {name: a, endpoints: ["10.0.0.1:80"]}
  - {name: b, endpoints: ["10.0.0.2:80"]}
  - {name: c, endpoints: ["10.0.0.3:80"]}
services:
  - name: s
    split:
      targets:
        - upstream: a
        - {upstream: b, weight: 0}
        - {upstream: c, weight: 4}
`
	s, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Target{{"a", 1}, {"b", 0}, {"c", 4}}
	if got := s.Services[0].Split.Targets; !reflect.DeepEqual(got, want) {
		t.Errorf("targets = %+v, want %+v", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	in := `
upstreams:
  - name: a
    endpoints: ["10.0.0.1:80"]
    health_check: {}
  - name: b
    endpoints: ["10.0.0.2:80"]
services:
  - name: s
    split:
      targets: [{upstream: a, weight: 90}, {upstream: b, weight: 10}]
      canary_analysis:
        promote: {metric: latency_p99, threshold: 0.2}
        rollback: {metric: latency_p99, threshold: 0.5}
    sticky: {cookie: sid}
`
	s, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := &Spec{
		Upstreams: []Upstream{
			{Name: "a", Balancer: "round_robin", Endpoints: []string{"10.0.0.1:80"},
				HealthCheck:      &HealthCheck{Path: "/healthz", IntervalS: 5, TimeoutS: 2, HealthyThreshold: 2, UnhealthyThreshold: 2, ExpectedStatus: StatusRange{200, 399}},
				ConnectTimeoutMS: DefaultConnectTimeoutMS, ResponseHeaderTimeoutMS: DefaultResponseHeaderTimeoutMS, IdleTimeoutMS: DefaultIdleTimeoutMS},
			{Name: "b", Balancer: "round_robin", Endpoints: []string{"10.0.0.2:80"}, ConnectTimeoutMS: DefaultConnectTimeoutMS, ResponseHeaderTimeoutMS: DefaultResponseHeaderTimeoutMS, IdleTimeoutMS: DefaultIdleTimeoutMS},
		},
		Services: []Service{{
			Name: "s", BasePath: "/",
			Split: &Split{
				Targets: []Target{{"a", 90}, {"b", 10}},
				CanaryAnalysis: &CanaryAnalysis{
					WindowSeconds: 60, Step: 5, MinRequests: 10, CooldownSeconds: 30,
					Promote:  Threshold{Metric: "latency_p99", Threshold: 0.2},
					Rollback: Threshold{Metric: "latency_p99", Threshold: 0.5},
				},
			},
			Sticky: &Sticky{Cookie: "sid", TTLSeconds: 3600},
		}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("parsed spec:\n got %+v\nwant %+v", s, want)
	}
}

func TestParseStructuralErrors(t *testing.T) {
	t.Parallel()
	example := string(readFile(t, "testdata/example.json"))
	exampleYAML := string(readFile(t, "testdata/example.yaml"))
	// replace edits the example once, failing the test if old is absent.
	replace := func(in, old, new string) string {
		if !strings.Contains(in, old) {
			t.Fatalf("example has no %q", old)
		}
		return strings.Replace(in, old, new, 1)
	}
	const target1 = "services[0].split.targets[1]"

	tests := []struct {
		name string
		in   string
		want []problem
	}{
		// unknown fields
		{name: "unknown top-level field", in: replace(example, `"services": [`, `"version": 2, "services": [`),
			want: []problem{{"version", "unknown field; allowed: upstreams, services", ""}}},
		{name: "unknown field in health check", in: replace(example, `"interval_s": 5,`, `"interval_s": 5, "retries": 3,`),
			want: []problem{{"upstreams[0].health_check.retries", "unknown field; allowed: path, interval_s", ""}}},
		{name: "unknown field in target", in: replace(example, `"weight": 5}`, `"weight": 5, "priority": 1}`),
			want: []problem{{target1 + ".priority", "unknown field; allowed: upstream, weight", ""}}},
		{name: "misspelled field in target", in: replace(example, `"weight": 5}`, `"wieght": 5}`),
			want: []problem{{target1 + ".wieght", "unknown field", ""}}},
		{name: "field names are case-sensitive", in: replace(example, `"name": "api",`, `"Name": "api", "name": "api",`),
			want: []problem{{"services[0].Name", "unknown field", ""}}},
		{name: "unknown field in yaml", in: replace(exampleYAML, "      ttl_s: 3600", "      ttl_s: 3600\n      secure: true"),
			want: []problem{{"services[0].sticky.secure", "unknown field; allowed: cookie, ttl_s", ""}}},
		{name: "unknown field in yaml target", in: replace(exampleYAML, "{ upstream: api-canary, weight: 5 }", "{ upstream: api-canary, weight: 5, canary: true }"),
			want: []problem{{target1 + ".canary", "unknown field", ""}}},
		{name: "unknown field with nested junk", in: replace(example, `"services": [`, `"x": {"a": [[{"b": null}]]}, "services": [`),
			want: []problem{{"x", "unknown field", ""}}},
		{name: "unknown fields and validation problems together",
			in: replace(replace(example, `"weight": 5}`, `"wieght": 5}`), `"ttl_s": 3600`, `"ttl_s": -1`),
			want: []problem{
				{target1 + ".wieght", "unknown field", ""},
				{"services[0].sticky.ttl_s", "must be 1..2592000, got -1", ""},
			}},

		// types
		{name: "weight as string", in: replace(example, `"weight": 5}`, `"weight": "5"}`),
			want: []problem{{target1 + ".weight", "must be an integer, got a string", ""}}},
		{name: "weight as fraction", in: replace(example, `"weight": 5}`, `"weight": 5.5}`),
			want: []problem{{target1 + ".weight", `must be an integer, got "5.5"`, ""}}},
		{name: "weight with exponent", in: replace(example, `"weight": 5}`, `"weight": 5e1}`),
			want: []problem{{target1 + ".weight", "must be an integer", ""}}},
		{name: "weight out of range", in: replace(example, `"weight": 5}`, `"weight": 99999999999999999999}`),
			want: []problem{{target1 + ".weight", "integer \"99999999999999999999\" is out of range", ""}}},
		{name: "threshold as string", in: replace(example, `"threshold": 0.01`, `"threshold": "1%"`),
			want: []problem{{"services[0].split.canary_analysis.promote.threshold", "must be a number, got a string", ""}}},
		{name: "threshold out of range", in: replace(example, `"threshold": 0.01`, `"threshold": 1e999`),
			want: []problem{{"services[0].split.canary_analysis.promote.threshold", "is out of range", ""}}},
		{name: "enabled as string", in: replace(example, `"enabled": true`, `"enabled": "yes"`),
			want: []problem{{"services[0].split.canary_analysis.enabled", "must be a boolean, got a string", ""}}},
		{name: "name as number", in: replace(example, `"name": "api",`, `"name": 7,`),
			want: []problem{{"services[0].name", "must be a string, got a number", ""}}},
		{name: "endpoints as string", in: replace(example, `"endpoints": ["127.0.0.1:9101"]`, `"endpoints": "127.0.0.1:9101"`),
			want: []problem{{"upstreams[1].endpoints", "must be an array, got a string", ""}}},
		{name: "split as array", in: `{"upstreams": [], "services": [{"name": "s", "split": [{"upstream": "a"}]}]}`,
			want: []problem{{"services[0].split", "must be an object, got an array", ""}}},
		{name: "sticky as array of objects", in: replace(example, `"sticky": {"cookie": "dwara_affinity", "ttl_s": 3600}`, `"sticky": [{"cookie": "x"}]`),
			want: []problem{{"services[0].sticky", "must be an object, got an array", ""}}},
		{name: "null array element", in: replace(example, `{"name": "api-canary",`, `null, {"name": "api-canary",`),
			want: []problem{{"upstreams[1]", "must be an object, got null", ""}}},
		{name: "null endpoint", in: replace(example, `"endpoints": ["127.0.0.1:9101"]`, `"endpoints": [null]`),
			want: []problem{{"upstreams[1].endpoints[0]", "must be a string, got null", ""}}},
		{name: "top-level array", in: `[` + example + `]`,
			want: []problem{{"", "must be an object, got an array", ""}}},
		{name: "top-level string", in: `"spec"`,
			want: []problem{{"", "must be an object, got a string", ""}}},
		{name: "every type problem at once, without validation", in: replace(replace(replace(example,
			`"weight": 5}`, `"weight": "5"}`),
			`"name": "api",`, `"name": "API!", "extra": 1,`),
			`"ttl_s": 3600`, `"ttl_s": "1h"`),
			want: []problem{
				{"services[0].extra", "unknown field", ""},
				{target1 + ".weight", "must be an integer", ""},
				{"services[0].sticky.ttl_s", "must be an integer", ""},
			}},
		{name: "type problems in yaml", in: replace(exampleYAML, "weight: 5 }", "weight: five }"),
			want: []problem{{target1 + ".weight", "must be an integer, got a string", ""}}},

		// duplicates
		{name: "duplicate json field", in: replace(example, `"base_path": "/v1",`, `"base_path": "/v1", "base_path": "/v2",`),
			want: []problem{{"services[0].base_path", "duplicate field", ""}}},
		{name: "duplicate yaml key", in: replace(exampleYAML, "    base_path: /v1", "    base_path: /v1\n    base_path: /v2"),
			want: []problem{{"services[0].base_path", "duplicate key at line 16 (first at line 15)", ""}}},
		{name: "duplicate yaml key in a list element", in: replace(exampleYAML, "      ttl_s: 3600", "      ttl_s: 3600\n      cookie: other"),
			want: []problem{{"services[0].sticky.cookie", "duplicate key at line", ""}}},
		{name: "duplicate top-level yaml key", in: exampleYAML + "services: []\n",
			want: []problem{{"services", "duplicate key at line", ""}}},

		// syntax and framing
		{name: "empty input", in: "", want: []problem{{"", "the spec is empty", ""}}},
		{name: "blank input", in: " \n\t\n", want: []problem{{"", "the spec is empty", ""}}},
		{name: "json null", in: "null", want: []problem{{"", "the spec is empty", ""}}},
		{name: "yaml comment only", in: "# nothing\n", want: []problem{{"", "the spec is empty", ""}}},
		{name: "json syntax error names the path", in: replace(example, `"weight": 5}`, `"weight": 5,}`),
			want: []problem{{target1, "invalid JSON at line 25, column", ""}}},
		{name: "json missing value", in: `{"upstreams": [{"name": }]}`,
			want: []problem{{"upstreams[0].name", "invalid JSON at line 1, column 25: invalid character '}'", ""}}},
		{name: "truncated json", in: `{"upstreams": [{"name": "a"`,
			want: []problem{{"upstreams[0]", "invalid JSON at line 1, column 28: unexpected end of input", ""}}},
		{name: "trailing comma", in: `{"upstreams": [], "services": [],}`,
			want: []problem{{"", "invalid JSON at line 1, column 34", ""}}},
		{name: "yaml flow mapping is read as json", in: `{upstreams: [], services: []}`,
			want: []problem{{"", "invalid JSON at line 1, column 2", ""}}},
		{name: "trailing object", in: example + `{}`,
			want: []problem{{"", "unexpected data after the spec at line 41, column 1", ""}}},
		{name: "trailing garbage", in: example + "\n x",
			want: []problem{{"", "unexpected data after the spec at line 42, column 2", ""}}},
		{name: "yaml syntax error", in: "upstreams: [\n", want: []problem{{"", "invalid YAML", ""}}},
		{name: "yaml bad indentation", in: "services:\n  - name: a\n   upstream: b\n", want: []problem{{"", "invalid YAML: line 2", ""}}},
		{name: "second yaml document", in: exampleYAML + "---\nservices: []\n",
			want: []problem{{"", fmt.Sprintf("a second document starts at line %d", strings.Count(exampleYAML, "\n")+2), ""}}},
		{name: "yaml after document end", in: exampleYAML + "...\nservices: []\n",
			want: []problem{{"", "data after the first document", ""}}},
		{name: "yaml infinity", in: strings.Replace(exampleYAML, "threshold: 0.01", "threshold: .inf", 1),
			want: []problem{{"", "invalid YAML", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse([]byte(tt.in))
			if s != nil {
				t.Errorf("Parse returned a spec with an error")
			}
			checkProblems(t, err, tt.want...)
		})
	}
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	exampleYAML := string(readFile(t, "testdata/example.yaml"))
	tests := []struct {
		name string
		in   string
	}{
		{"yaml with leading document marker", "---\n" + exampleYAML},
		{"yaml with trailing document marker", exampleYAML + "---\n"},
		{"yaml with document end", exampleYAML + "...\n"},
		{"json with nulls for absent fields", `{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"], "health_check": null, "balancer": null}],
			"services": [{"name": "s", "upstream": "a", "split": null, "sticky": null, "host": null}]}`},
		{"json with surrounding white space", "\n  " + `{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"]}], "services": [{"name": "s", "upstream": "a"}]}` + "\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Parse([]byte(tt.in)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestParseYAMLFlowMapping(t *testing.T) {
	t.Parallel()
	in := `{upstreams: [{name: a, endpoints: ["10.0.0.1:80"]}], services: [{name: s, upstream: a}]}`
	s, err := parseYAML([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if svc, i := s.Service("s"); i != 0 || svc.Upstream != "a" {
		t.Errorf("Service(s) = %+v, %d", svc, i)
	}
}

func TestParseValidationProblems(t *testing.T) {
	t.Parallel()
	in := `
upstreams:
  - name: api-stable
    balancer: fastest
    endpoints: []
  - name: api-canary
    endpoints: ["localhost"]
services:
  - name: api
    base_path: v1/
    split:
      targets:
        - {upstream: api-stable, weight: -5}
        - {upstream: api-canry}
    sticky: {cookie: "my cookie"}
  - name: api
    upstream: api-stable
`
	_, err := Parse([]byte(in))
	checkProblems(t, err,
		problem{"upstreams[0].balancer", `unknown balancer "fastest"`, ""},
		problem{"upstreams[0].endpoints", "must list 1..64 endpoints, got 0", ""},
		problem{"upstreams[1].endpoints[0]", "must be host:port", ""},
		problem{"services[0].base_path", `must start with "/"`, ""},
		problem{"services[0].split.targets[0].weight", "must be 0..1000000, got -5", ""},
		problem{"services[0].split.targets[1].upstream", `unknown upstream "api-canry"; did you mean "api-canary"?`, ""},
		problem{"services[0].sticky.cookie", "RFC 6265 token", ""},
		problem{"services[1].name", `duplicate service name "api" (also services[0])`, ""},
	)
}

func TestParseRoundTrip(t *testing.T) {
	t.Parallel()
	s, err := Parse(readFile(t, "testdata/example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	again, err := parseJSONFormat(out)
	if err != nil {
		t.Fatalf("re-parse %s: %v", out, err)
	}
	if !reflect.DeepEqual(s, again) {
		t.Errorf("round trip changed the spec:\n got %+v\nwant %+v", again, s)
	}
}

func TestTargetUnmarshalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []Target
		wantErr string
	}{
		{"absent weight", `[{"upstream": "a"}]`, []Target{{"a", 1}}, ""},
		{"zero weight", `[{"upstream": "a", "weight": 0}]`, []Target{{"a", 0}}, ""},
		{"null target", `[null]`, []Target{{}}, ""},
		{"unknown field", `[{"upstream": "a", "share": 3}]`, nil, `unknown field "share"`},
		{"wrong type", `[{"upstream": "a", "weight": "3"}]`, nil, "decode split target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Plain json.Unmarshal, which does not disallow unknown fields:
			// the target must refuse them itself.
			var got []Target
			err := json.Unmarshal([]byte(tt.in), &got)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestShapeCoversSpec(t *testing.T) {
	t.Parallel()
	sh := specShape()
	target := sh.field("services").elem.field("split").field("targets").elem
	if target == nil || target.kind != kindObject || target.field("weight").kind != kindInteger {
		t.Fatalf("shape of Target = %+v", target)
	}
	thr := sh.field("services").elem.field("split").field("canary_analysis").field("promote").field("threshold")
	if thr == nil || thr.kind != kindNumber {
		t.Fatalf("shape of Threshold.Threshold = %+v", thr)
	}
}

func parseYAML(data []byte) (*Spec, error)       { return ParseAs(data, FormatYAML) }
func parseJSONFormat(data []byte) (*Spec, error) { return ParseAs(data, FormatJSON) }

func TestParseMalformed(t *testing.T) {
	t.Parallel()
	exampleYAML := string(readFile(t, "testdata/example.yaml"))
	tests := []struct {
		name      string
		in        string
		malformed bool
	}{
		{"json syntax error", `{"upstreams": [`, true},
		{"json trailing data", `{"upstreams": [], "services": []} x`, true},
		{"yaml syntax error", "upstreams: [\n", true},
		{"yaml duplicate key", exampleYAML + "services: []\n", false},
		{"second yaml document", exampleYAML + "---\nservices: []\n", false},
		{"unknown field", `{"upstreams": [], "services": [], "x": 1}`, false},
		{"wrong type", `{"upstreams": 1, "services": []}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.in))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse = %v, want a *ValidationError", err)
			}
			if ve.Malformed != tt.malformed {
				t.Errorf("Malformed = %t, want %t (%v)", ve.Malformed, tt.malformed, err)
			}
		})
	}
}

func TestParseEnvelope(t *testing.T) {
	t.Parallel()
	spec := strings.ReplaceAll(minimal(`{"upstream": "b", "weight": 1}`), "\n", " ")
	specYAML := "upstreams:\n  - {name: a, endpoints: [\"10.0.0.1:80\"]}\nservices:\n  - {name: s, upstream: a}\n"
	tests := []struct {
		name    string
		in      string
		format  Format
		message string
		want    []problem
	}{
		{name: "json", in: `{"message": "why", "spec": ` + spec + `}`, format: FormatJSON, message: "why"},
		{name: "json without message", in: `{"spec": ` + spec + `}`, format: FormatJSON},
		{name: "json null message", in: `{"message": null, "spec": ` + spec + `}`, format: FormatJSON},
		{name: "yaml", in: "message: from yaml\nspec:\n" + indent(specYAML), format: FormatYAML, message: "from yaml"},
		{name: "auto detects json", in: `{"message": "m", "spec": ` + spec + `}`, format: FormatAuto, message: "m"},

		{name: "duplicate json spec", in: `{"spec": ` + spec + `,` + "\n" + `"spec": ` + spec + `}`, format: FormatJSON,
			want: []problem{{"spec", "duplicate field at line 2", ""}}},
		{name: "duplicate json message", in: `{"message": "a", "message": "b", "spec": ` + spec + `}`, format: FormatJSON,
			want: []problem{{"message", "duplicate field at line 1", ""}}},
		{name: "duplicate yaml message", in: "message: a\nmessage: b\nspec:\n" + indent(specYAML), format: FormatYAML,
			want: []problem{{"message", "duplicate key at line 2 (first at line 1)", ""}}},
		{name: "duplicate key inside the yaml spec", in: "spec:\n" + indent(specYAML) + "  services: []\n", format: FormatYAML,
			want: []problem{{"spec.services", "duplicate key at line 6 (first at line 4)", ""}}},
		{name: "two yaml documents", in: "spec:\n" + indent(specYAML) + "---\nspec: {}\n", format: FormatYAML,
			want: []problem{{"", "a second document starts at line 7", ""}}},
		{name: "unknown envelope field", in: `{"spec": ` + spec + `, "author": "eve"}`, format: FormatJSON,
			want: []problem{{"author", "unknown field; allowed: message, spec", ""}}},
		{name: "message not a string", in: `{"message": ["a"], "spec": ` + spec + `}`, format: FormatJSON,
			want: []problem{{"message", "must be a string", ""}}},
		{name: "missing spec", in: `{"message": "m"}`, format: FormatJSON,
			want: []problem{{"spec", "is required", ""}}},
		{name: "null spec", in: `{"spec": null}`, format: FormatJSON,
			want: []problem{{"spec", "is required", ""}}},
		{name: "not an object", in: `[1]`, format: FormatJSON,
			want: []problem{{"", "must be an object", ""}}},
		{name: "empty", in: ``, format: FormatJSON,
			want: []problem{{"", "the body is empty", ""}}},
		{name: "trailing data", in: `{"spec": ` + spec + `} {}`, format: FormatJSON,
			want: []problem{{"", "unexpected data after the body", ""}}},
		{name: "invalid spec", in: `{"spec": {"upstreams": [], "services": [{"name": "s", "upstream": "x"}]}}`, format: FormatJSON,
			want: []problem{{"services[0].upstream", "unknown upstream", ""}}},
		{name: "json syntax error in the spec", in: `{"spec": {"upstreams": [}}`, format: FormatJSON,
			want: []problem{{"spec", "invalid JSON at line 1", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := ParseEnvelope([]byte(tt.in), tt.format)
			checkProblems(t, err, tt.want...)
			if err != nil {
				return
			}
			if env.Spec == nil || env.Message != tt.message {
				t.Errorf("envelope = message %q, spec %v; want message %q and a spec", env.Message, env.Spec, tt.message)
			}
		})
	}
}

func TestParseDocument(t *testing.T) {
	t.Parallel()
	spec := minimal(`{"upstream": "b"}`)
	tests := []struct {
		name    string
		in      string
		message string
		want    []problem
	}{
		{name: "bare json spec", in: spec},
		{name: "json envelope", in: `{"message": "m", "spec": ` + spec + `}`, message: "m"},
		{name: "yaml envelope", in: "message: hello\nspec: " + spec + "\n", message: "hello"},
		{name: "a spec with a message field is a spec", in: `{"message": "m", "upstreams": [], "services": []}`,
			want: []problem{{"message", "unknown field", ""}, {"services", "at least one service", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, err := ParseDocument([]byte(tt.in))
			checkProblems(t, err, tt.want...)
			if err == nil && (env.Spec == nil || env.Message != tt.message) {
				t.Errorf("document = message %q, spec %v; want message %q and a spec", env.Message, env.Spec, tt.message)
			}
		})
	}
}

// indent indents every line of s by two spaces.
func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n  ") + "\n"
}

func TestParsePassive(t *testing.T) {
	t.Parallel()
	const base = "upstreams: [{name: a, endpoints: [\"10.0.0.1:80\", \"10.0.0.2:80\"], passive: %s}]\nservices: [{name: s, upstream: a}]\n"
	s, err := Parse([]byte(fmt.Sprintf(base, "{consecutive_5xx: 4}")))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Upstreams[0].Passive, (&Passive{ConsecutiveFailures: DefaultPassiveConsecutiveFailures, Consecutive5xx: 4}); !reflect.DeepEqual(got, want) {
		t.Errorf("passive = %+v, want %+v", got, want)
	}
	s, err = Parse([]byte("upstreams: [{name: a, endpoints: [\"10.0.0.1:80\"]}]\nservices: [{name: s, upstream: a}]\n"))
	if err != nil || s.Upstreams[0].Passive != nil {
		t.Errorf("without passive: %+v, %v; want nil (the defaults apply)", s.Upstreams[0].Passive, err)
	}
	_, err = Parse([]byte(fmt.Sprintf(base, "{consecutive_failures: 0, max_ejection_percent: 50}")))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Errors) != 1 || ve.Errors[0].Path != "upstreams[0].passive.max_ejection_percent" ||
		!strings.Contains(ve.Errors[0].Message, "allowed: consecutive_failures, consecutive_5xx") {
		t.Errorf("unknown passive field: %v", err)
	}
}

// TestByteOrderMarkIgnored: a UTF-8 BOM before a JSON or YAML spec, or a
// publish body, is ignored; anywhere else it is an error as before.
func TestByteOrderMarkIgnored(t *testing.T) {
	t.Parallel()
	js := `{"upstreams":[{"name":"a","endpoints":["10.0.0.1:80"]}],"services":[{"name":"web","upstream":"a"}]}`
	ym := "upstreams: [{name: a, endpoints: [\"10.0.0.1:80\"]}]\nservices: [{name: web, upstream: a}]\n"
	bom := "\xef\xbb\xbf"
	for _, c := range []struct {
		name string
		data string
		f    Format
	}{{"json", bom + js, FormatJSON}, {"auto json", bom + js, FormatAuto}, {"yaml", bom + ym, FormatYAML}, {"auto yaml", bom + ym, FormatAuto}} {
		if s, err := ParseAs([]byte(c.data), c.f); err != nil || len(s.Services) != 1 {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if e, err := ParseEnvelope([]byte(bom+`{"message":"m","spec":`+js+`}`), FormatJSON); err != nil || e.Message != "m" {
		t.Errorf("envelope: %+v, %v", e, err)
	}
	if _, err := ParseAs([]byte(`{"upstreams":`+bom+`[]}`), FormatJSON); err == nil {
		t.Error("a BOM inside the document was accepted")
	}
}

// TestInvalidTextRefused: a spec string with invalid UTF-8 or a lone
// surrogate escape is refused with its path, not stored as U+FFFD; a
// real U+FFFD and a proper surrogate pair are text like any other.
func TestInvalidTextRefused(t *testing.T) {
	t.Parallel()
	spec := func(basePath string) []byte {
		return []byte(`{"upstreams":[{"name":"a","endpoints":["10.0.0.1:80"]}],"services":[{"name":"web","base_path":"` + basePath + `","upstream":"a"}]}`)
	}
	for _, bad := range []string{"/v1\xff", `/v1\ud800`, `/v1\udc00x`, `/v1\ud800\u0041`} {
		_, err := ParseAs(spec(bad), FormatJSON)
		if err == nil || !strings.Contains(err.Error(), "services[0].base_path: must be valid UTF-8 text") {
			t.Errorf("base_path %q: %v, want refused at services[0].base_path", bad, err)
		}
	}
	for _, good := range []string{`/v1\ufffd`, "/v1\xef\xbf\xbd", `/v1\ud83d\ude00`, `/v1\\ud800`} {
		if _, err := ParseAs(spec(good), FormatJSON); err != nil && strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("base_path %q refused: %v", good, err)
		}
	}
}
