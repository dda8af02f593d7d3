package httproute

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

// richSpec has what the mapping carries: a sticky split under canary
// analysis on a host, a plain route, a split with stable allocation, a
// forced-branch header and a mirror of a fractional share.
const richSpec = `upstreams:
  - name: web-stable
    endpoints: ["127.0.0.1:9001", "127.0.0.1:9002"]
  - name: web-canary
    endpoints: ["127.0.0.1:9101"]
    connect_timeout_ms: 2000
  - name: shadow
    endpoints: ["127.0.0.1:9201"]
services:
  - name: web
    base_path: /
    host: shop.example.com
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
    sticky: {cookie: dwara_affinity, ttl_s: 3600}
  - name: docs
    base_path: /docs
    upstream: web-stable
  - name: api
    base_path: /api
    split:
      targets:
        - {upstream: web-stable, weight: 60}
        - {upstream: web-canary, weight: 40}
      allocation: stable
    override: {header: X-Dwara-Branch}
    mirror: {upstream: shadow, percent: 2.5, max_body_bytes: 4096}
`

func parse(t *testing.T, s string) *config.Spec {
	t.Helper()
	spec, err := config.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// canonical is the JSON of spec without its slot tables (computed at
// publish from the parent generation, not part of what a route says).
func canonical(t *testing.T, spec *config.Spec) string {
	t.Helper()
	for i := range spec.Services {
		if spec.Services[i].Split != nil {
			spec.Services[i].Split.Slots = nil
		}
	}
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

// Export then Import gives the spec back, field for field.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	spec := parse(t, richSpec)
	routes, ups, err := Export(spec, nil, ExportOptions{Namespace: "shop", Gateway: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\n",
		"  namespace: shop\n",
		"  - name: edge\n",
		"  - shop.example.com\n",
		"        type: PathPrefix\n        value: /docs\n",
		"      weight: 90\n",
		"    sessionPersistence:\n",
		"      absoluteTimeout: 3600s\n",
		"denominator: 10000\n",
		"numerator: 250\n",
		"dwara.io/override-header: X-Dwara-Branch",
	} {
		if !strings.Contains(string(routes), want) {
			t.Errorf("the export lacks %q:\n%s", want, routes)
		}
	}
	back, err := Import(routes, ups)
	if err != nil {
		t.Fatalf("import of the export: %v", err)
	}
	if got, want := canonical(t, back), canonical(t, parse(t, richSpec)); got != want {
		t.Errorf("the round trip changed the spec:\n got %s\nwant %s", got, want)
	}
	// One service: only the upstreams it names.
	routes, ups, err = Export(spec, []string{"docs"}, ExportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(routes), "kind: HTTPRoute") != 1 || strings.Contains(string(ups), "web-canary") || !strings.Contains(string(ups), "web-stable") {
		t.Errorf("export of docs:\n%s\n%s", routes, ups)
	}
	if _, _, err := Export(spec, []string{"dcs"}, ExportOptions{}); err == nil || !strings.Contains(err.Error(), `did you mean "docs"?`) {
		t.Errorf("export of an unknown service: %v", err)
	}
}

const upstreamsDoc = `upstreams:
  - {name: web-stable, endpoints: ["127.0.0.1:9001"]}
  - {name: web-canary, endpoints: ["127.0.0.1:9101"]}
`

// A route with what Dwara cannot serve is refused with every such field
// named, and nothing is built.
func TestImportRefusals(t *testing.T) {
	t.Parallel()
	routes := `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
  annotations:
    dwara.io/canary-analyss: "{}"
spec:
  hostnames: ["a.example.com", "b.example.com"]
  rules:
    - matches:
        - path: {type: Exact, value: /login}
          headers: [{name: X-Group, value: beta}]
      filters:
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
      timeouts: {request: 10s}
      backendRefs:
        - {name: web-stabel, port: 80, weight: 90}
        - {name: web-canary, namespace: other, port: 80, weight: 10}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ok}
spec:
  rules:
    - backendRefs: [{name: web-stable, port: 80}]
`
	_, err := Import([]byte(routes), []byte(upstreamsDoc))
	var ie *Error
	if !errors.As(err, &ie) {
		t.Fatalf("import: %v, want an *Error", err)
	}
	var got []string
	for _, p := range ie.Problems {
		got = append(got, p.Route+" "+p.Path)
	}
	want := []string{
		"web metadata.annotations.dwara.io/canary-analyss",
		"web spec.hostnames",
		"web spec.rules[0].matches[0].path.type",
		"web spec.rules[0].matches[0].headers",
		"web spec.rules[0].timeouts",
		"web spec.rules[0].backendRefs[0].name",
		"web spec.rules[0].backendRefs[1].namespace",
		"web spec.rules[0].filters[0].type",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q\nwant %q", got, want)
	}
	for _, p := range ie.Problems {
		if p.Path == "spec.rules[0].filters[0].type" && !strings.Contains(p.Message, "URLRewrite is not supported") {
			t.Errorf("the filter's problem: %q", p.Message)
		}
		if p.Path == "spec.rules[0].backendRefs[0].name" && !strings.Contains(p.Message, `did you mean "web-stable"?`) {
			t.Errorf("the backend's problem: %q", p.Message)
		}
	}
}

// The documents may be JSON, a List of routes, or carry fields the upstream
// types do not know (refused by the strict decoder, with the field).
func TestImportShapes(t *testing.T) {
	t.Parallel()
	list := `{"apiVersion": "v1", "kind": "List", "items": [
	  {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "a"},
	   "spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/a"}}], "backendRefs": [{"name": "web-stable", "port": 80}]}]}},
	  {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "b"},
	   "spec": {"rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/b"}}], "backendRefs": [{"name": "web-stable", "port": 80, "weight": 1}, {"name": "web-canary", "port": 80, "weight": 3}]}]}}
	]}`
	spec, err := Import([]byte(list), []byte(upstreamsDoc))
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Services) != 2 || spec.Services[0].Upstream != "web-stable" || spec.Services[1].Split == nil || spec.Services[1].Split.Targets[1].Weight != 3 {
		t.Errorf("services %+v", spec.Services)
	}
	typo := "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: a}\nspec:\n  rulez: []\n"
	_, err = Import([]byte(typo), []byte(upstreamsDoc))
	var ie *Error
	if !errors.As(err, &ie) || len(ie.Problems) != 1 || !strings.Contains(ie.Problems[0].Message, `unknown field "rulez"`) || ie.Problems[0].Route != "a" {
		t.Errorf("a route with an unknown field: %v", err)
	}
	if _, err := Import([]byte(typo), []byte("upstreams: []\n")); err == nil || !strings.Contains(err.Error(), "none is defined") {
		t.Errorf("no upstreams: %v", err)
	}
	// What Dwara's own validation refuses is refused after the mapping.
	zero := "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: a}\nspec:\n  rules:\n    - backendRefs: [{name: web-stable, port: 80, weight: 0}, {name: web-canary, port: 80, weight: 0}]\n"
	if _, err := Import([]byte(zero), []byte(upstreamsDoc)); err == nil || !strings.Contains(err.Error(), "services[0].split") {
		t.Errorf("a split of weight 0: %v", err)
	}
}
