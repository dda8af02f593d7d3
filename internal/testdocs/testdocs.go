// Package testdocs reads the project's documentation for tests: README.md
// (what Dwara is, "Start here", the map) and the pages of docs/, which
// hold every other section. Tests that check the documentation against
// the code (a metric documented, a command that runs verbatim, an alert
// with a runbook) find a section wherever it lives.
package testdocs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Files returns the documentation's files relative to root (the module's
// directory): README.md, then docs/README.md and the pages of docs/ in
// name order.
func Files(t testing.TB, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, p := range pages {
		files = append(files, filepath.ToSlash(filepath.Join("docs", filepath.Base(p))))
	}
	return files
}

// Text returns every file of Files, each followed by a blank line.
func Text(t testing.TB, root string) string {
	t.Helper()
	var b strings.Builder
	for _, f := range Files(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteString("\n\n")
	}
	return b.String()
}

// Section returns the section headed "## title" from the line after its
// heading to the next "## " heading or the end of its file, wherever in
// the documentation it is; the test fails when no file has it.
func Section(t testing.TB, root, title string) string {
	t.Helper()
	for _, f := range Files(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, ok := strings.Cut(string(data), "\n## "+title+"\n"); ok {
			section, _, _ := strings.Cut(rest, "\n## ")
			return section
		}
	}
	t.Fatalf("the documentation (README.md, docs/) has no section %q", title)
	return ""
}
