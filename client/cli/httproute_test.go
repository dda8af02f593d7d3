package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dwara/dwara/node"
)

// The demo spec exported as HTTPRoutes and imported back is the active
// generation again ("unchanged"); an HTTPRoute with a filter Dwara cannot
// serve is refused with the field named, and nothing is stored.
func TestExportImport(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	dir := t.TempDir()
	demo := node.DemoSpec([]string{"127.0.0.1:9001", "127.0.0.1:9002"}, []string{"127.0.0.1:9101"})
	a.must(t, "apply", "-f", writeSpec(t, "demo.yaml", demo))
	ups := filepath.Join(dir, "upstreams.yaml")
	routes := a.must(t, "export", "--format", "httproute", "--upstreams", ups, "--namespace", "shop")
	if strings.Count(routes, "kind: HTTPRoute") != 2 || !strings.Contains(routes, "sessionPersistence") || !strings.Contains(routes, "dwara.io/canary-analysis") {
		t.Errorf("the export of the demo:\n%s", routes)
	}
	routesFile := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routesFile, []byte(routes), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := a.must(t, "import", "-f", routesFile, "--upstreams", ups); !strings.HasPrefix(out, "unchanged: generation 1 is active and already has this spec") {
		t.Errorf("import of the export: %q, want unchanged", out)
	}
	// The same as JSON (a List).
	listFile := filepath.Join(dir, "routes.json")
	if err := os.WriteFile(listFile, []byte(a.must(t, "export", "--format", "httproute", "-o", "json", "--upstreams", ups)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := a.must(t, "import", "-f", listFile, "--upstreams", ups); !strings.HasPrefix(out, "unchanged: ") {
		t.Errorf("import of the JSON export: %q, want unchanged", out)
	}

	rewrite := strings.Replace(routes, "    filters: []\n", "", 1)
	rewrite = strings.Replace(rewrite, "  rules:\n  - backendRefs:", "  rules:\n  - filters:\n    - type: URLRewrite\n      urlRewrite:\n        hostname: other.example.com\n    backendRefs:", 1)
	if rewrite == routes {
		t.Fatalf("the test's edit did not apply to:\n%s", routes)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(rewrite), 0o600); err != nil {
		t.Fatal(err)
	}
	r := a.run(t, "import", "-f", bad, "--upstreams", ups)
	if r.code != 1 || !strings.Contains(r.stderr, "bad.yaml cannot be served as they are; nothing was sent") ||
		!strings.Contains(r.stderr, "spec.rules[0].filters[0].type: URLRewrite is not supported") {
		t.Errorf("import of a URLRewrite: %s", r)
	}
	if n := a.count(t); n != 1 {
		t.Errorf("%d generations after a refused import, want 1", n)
	}
	if r := a.run(t, "export", "--format", "ingress"); r.code != 2 || !strings.Contains(r.stderr, `--format must be httproute, not "ingress"`) {
		t.Errorf("export --format ingress: %s", r)
	}
	if r := a.run(t, "export", "--format", "httproute", "wbe"); r.code != 1 || !strings.Contains(r.stderr, `did you mean "web"?`) {
		t.Errorf("export of an unknown service: %s", r)
	}
}
