package client_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies holds the dependency rule of the README's architecture
// section: the client and the CLI speak the API's wire types only, so they
// never link the server, the database driver, the router, the migrations,
// the metrics library or the docs page; and the wire types are a leaf that
// imports only the standard library.
func TestDependencies(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		"github.com/jackc/pgx",
		"github.com/prometheus/",
		"github.com/go-chi/chi",
		"github.com/golang-migrate/",
		"github.com/swaggest/",
		"github.com/dwara/dwara/api",  // the server (api/apiv1 is allowed, checked below)
		"github.com/dwara/dwara/db",   // the store
		"github.com/dwara/dwara/node", // process assembly
		"github.com/dwara/dwara/gateway/proxy",
	}
	for _, dep := range deps(t, "./...") {
		if dep == "github.com/dwara/dwara/api/apiv1" {
			continue
		}
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f) && (strings.HasSuffix(f, "/") || strings.HasPrefix(dep, f+"/")) {
				t.Errorf("the client depends on %s (forbidden: %s)", dep, f)
			}
		}
	}
	for _, dep := range deps(t, "../api/apiv1") {
		if dep != "github.com/dwara/dwara/api/apiv1" && strings.Contains(strings.Split(dep, "/")[0], ".") {
			t.Errorf("api/apiv1 depends on %s; it must import only the standard library", dep)
		}
	}
}

// deps lists the packages that pattern (relative to this directory) depends
// on, itself included, tests excluded.
func deps(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", pattern).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pattern, err)
	}
	list := strings.Fields(string(out))
	if len(list) < 5 {
		t.Fatalf("go list -deps %s listed only %v", pattern, list)
	}
	return list
}
