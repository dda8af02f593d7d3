package main

import (
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// allowedImports is the package graph of the README's architecture section:
// for every package of the module, the packages of the module it may import
// (tests excluded). A package missing here fails the test, so a new package
// is added to the table, and to the README, on purpose.
var allowedImports = map[string][]string{
	"cmd/dwara":                {"client/cli", "db", "node"},
	"node":                     {"api", "api/apiv1", "db", "demo", "gateway/config", "gateway/fleet", "gateway/proxy", "gateway/source", "web"},
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
	"gateway/proxy":            {"api/apiv1", "gateway/affinity", "gateway/balance", "gateway/canary", "gateway/config", "gateway/health", "gateway/split"},
	"gateway/health":           {"gateway/balance", "gateway/config"},
	"gateway/balance":          {"gateway/config", "gateway/split"},
	"gateway/config":           {"gateway/split"},
	"gateway/config/spectest":  {"demo", "gateway/config"},
	"gateway/config/httproute": {"gateway/config"},
	"gateway/split":            {},
	"gateway/affinity":         {},
	"gateway/modelreq":         {},
	"openapi":                  {},
	"web":                      {},
	"migrations":               {},
	"demo":                     {},
	"internal/testrun":         {},
	"internal/testlog":         {"internal/testrun"},
	"internal/testnet":         {},
	"internal/teststat":        {},
	"internal/testcert":        {},
	"bench/compare":            {},
	"bench/upstream":           {},
	"web/webtest":              {},
	"deploy/grafana":           {},
	"deploy/prometheus":        {},
	"deploy/compose":           {},
	"deploy/kubernetes":        {},
	"demos":                    {},
	"demos/upstream":           {"demo"},
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
