package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeVersion builds the binary with make, as make build and make
// install do, and checks that the version is linked in.
func TestMakeVersion(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	bin := filepath.Join(t.TempDir(), "dwara")
	build := exec.CommandContext(t.Context(), "make", "-C", "../..", "build", "BIN="+bin, "VERSION=v9.9.9-make")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(t.Context(), bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "dwara v9.9.9-make (") {
		t.Errorf("dwara version after make build: %q, %v", out, err)
	}
	dry := func(target string) string {
		out, err := exec.CommandContext(t.Context(), "make", "-C", "../..", "-n", target, "VERSION=v1-dry").Output()
		if err != nil {
			t.Fatalf("make -n %s: %v", target, err)
		}
		return string(out)
	}
	if got := dry("install"); !strings.Contains(got, `install -ldflags "-X main.version=v1-dry" ./cmd/dwara`) {
		t.Errorf("make install does not go install with the version: %s", got)
	}
	if got := dry("demo-reset"); !regexp.MustCompile(`bin/dwara serve --demo --reset`).MatchString(got) {
		t.Errorf("make demo-reset does not run serve --demo --reset: %s", got)
	}
	// Without VERSION, the version is git describe's.
	out, err = exec.CommandContext(t.Context(), "make", "-C", "../..", "-n", "build").Output()
	if err != nil || !regexp.MustCompile(`-X main\.version=\S+`).Match(out) || strings.Contains(string(out), "main.version= ") {
		t.Errorf("make build without VERSION: %s (%v)", out, err)
	}
}

// TestDocReferences checks that the make and script files cite only what
// the repository has: README sections, not a DESIGN.md it does not have.
func TestDocReferences(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cite := regexp.MustCompile(`README(?:\.md)?, "([^"]+)"`)
	for _, f := range []string{"../../Makefile", "../../scripts/postgres.sh", "../../Dockerfile", "../../docker-compose.yml"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "DESIGN.md") {
			t.Errorf("%s cites DESIGN.md, which the repository does not have", f)
		}
		for _, m := range cite.FindAllStringSubmatch(string(data), -1) {
			if !strings.Contains(string(readme), "\n## "+m[1]+"\n") {
				t.Errorf("%s cites README section %q, which README.md does not have", f, m[1])
			}
		}
	}
}
