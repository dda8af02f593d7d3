package main

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// allowedImports is the package graph of docs/architecture.md:
// for every package of the module, the packages of the module it may import
// (tests excluded). A package missing here fails the test, so a new package
// is added to the table, and to docs/architecture.md, on purpose.
var allowedImports = map[string][]string{
	"cmd/dwara":                {"client/cli", "db", "node"},
	"node":                     {"api", "api/apiv1", "db", "demo", "gateway/config", "gateway/fleet", "gateway/proxy", "gateway/proxy/front", "gateway/source", "web"},
	"client/cli":               {"api/apiv1", "client", "gateway/config", "gateway/config/httproute"},
	"client":                   {"api/apiv1"},
	"api":                      {"api/apiv1", "db", "gateway/canary", "gateway/config", "openapi", "web"},
	"api/apiv1":                {},
	"api/apitest":              {"api", "db", "db/dbtest"},
	"db":                       {"api/apiv1", "migrations"},
	"db/dbtest":                {"db", "migrations"},
	"gateway/source":           {"api/apiv1", "db", "gateway/config"},
	"gateway/fleet":            {"api/apiv1", "db", "gateway/canary", "gateway/config", "gateway/proxy"},
	"gateway/canary":           {"api/apiv1", "gateway/config"},
	"gateway/proxy":            {"api/apiv1", "gateway/affinity", "gateway/balance", "gateway/cache", "gateway/canary", "gateway/config", "gateway/health", "gateway/match", "gateway/modelreq", "gateway/split"},
	"gateway/proxy/front":      {"gateway/proxy", "gateway/proxy/fastfront", "gateway/proxy/h2server", "gateway/proxy/httpfront"},
	"gateway/proxy/h2server":   {},
	"gateway/proxy/fastfront":  {"api/apiv1", "gateway/proxy"},
	"gateway/proxy/httpfront":  {"api/apiv1", "gateway/proxy"},
	"gateway/health":           {"gateway/balance", "gateway/config"},
	"gateway/balance":          {"gateway/config", "gateway/split"},
	"gateway/config":           {"gateway/split"},
	"gateway/config/spectest":  {"demo", "gateway/config"},
	"gateway/config/httproute": {"gateway/config"},
	"gateway/split":            {},
	"gateway/affinity":         {},
	"gateway/modelreq":         {},
	"gateway/match":            {"gateway/config"},
	"gateway/cache":            {},
	"openapi":                  {},
	"web":                      {},
	"migrations":               {},
	"demo":                     {},
	"internal/testrun":         {},
	"internal/testlog":         {"internal/testrun"},
	"internal/testnet":         {},
	"internal/teststat":        {},
	"internal/testcert":        {},
	"internal/fakeai":          {},
	"internal/testdocs":        {},
	"bench/compare":            {},
	"bench/tlsload":            {},
	"bench/upstream":           {},
	"web/webtest":              {},
	"deploy/grafana":           {},
	"deploy/prometheus":        {},
	"deploy/compose":           {},
	"deploy/kubernetes":        {},
	"demos":                    {},
	"demos/upstream":           {"demo", "internal/fakeai"},
	"faults":                   {},
}

// TestArchitecture checks every package's imports against allowedImports.
func TestArchitecture(t *testing.T) {
	t.Parallel()
	const module = "github.com/dwara/dwara/"
	out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	tracked := trackedDirs(t)
	seen := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		allowed, ok := allowedImports[pkg]
		if !ok && tracked != nil && !tracked[pkg] {
			continue // a folder of the work tree that git does not track: not part of the project (yet)
		}
		if !ok {
			t.Errorf("package %s is not in the architecture table", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if ours && !slices.Contains(allowed, dep) {
				t.Errorf("%s imports %s; it may import only %v", pkg, dep, allowed)
			}
		}
	}
	if seen != len(allowedImports) {
		t.Errorf("go list showed %d of the %d packages in the table", seen, len(allowedImports))
	}
}

// trackedDirs returns the directories (relative to the module root) that
// hold a Go file git tracks, or nil outside a git work tree.
func trackedDirs(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "git", "-C", "../..", "ls-files", "--", "*.go").Output()
	if err != nil {
		return nil
	}
	dirs := map[string]bool{}
	for f := range strings.Lines(string(out)) {
		dirs[path.Dir(strings.TrimSpace(f))] = true
	}
	return dirs
}

// serverLibraries are the HTTP server libraries: only the fronts
// (gateway/proxy/fastfront, httpfront, front) import them.
var serverLibraries = []string{"github.com/valyala/fasthttp", "net/http"}

// TestCoreImportsNoServer checks that the forwarding core (gateway/proxy,
// tests excluded) imports no HTTP server library (fasthttp, net/http or
// any net/http/... package), and that node imports no fasthttp: it knows
// the fronts only through gateway/proxy/front.
func TestCoreImportsNoServer(t *testing.T) {
	t.Parallel()
	const module = "github.com/dwara/dwara/"
	imports := func(pkg string) []string {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-f", `{{join .Imports " "}}`, module+pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	if bad := serverImports(imports("gateway/proxy"), serverLibraries); len(bad) > 0 {
		t.Errorf("gateway/proxy imports %v; the core imports no HTTP server library", bad)
	}
	if bad := serverImports(imports("node"), serverLibraries[:1]); len(bad) > 0 {
		t.Errorf("node imports %v; it knows the fronts only through gateway/proxy/front", bad)
	}
}

// serverImports returns the imports that are one of libs or under one
// of them (net/http/httputil is under net/http).
func serverImports(imports, libs []string) []string {
	var bad []string
	for _, imp := range imports {
		for _, lib := range libs {
			if imp == lib || strings.HasPrefix(imp, lib+"/") {
				bad = append(bad, imp)
			}
		}
	}
	return bad
}

// TestServerImports: serverImports finds a library and the packages under
// it, and nothing else, so that TestCoreImportsNoServer can fail.
func TestServerImports(t *testing.T) {
	t.Parallel()
	got := serverImports([]string{"net", "net/http/httputil", "net/http", "net/httpx", "github.com/valyala/fasthttp", "io"}, serverLibraries)
	if want := []string{"net/http/httputil", "net/http", "github.com/valyala/fasthttp"}; !slices.Equal(got, want) {
		t.Errorf("serverImports = %v, want %v", got, want)
	}
}
