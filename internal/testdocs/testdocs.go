// Package testdocs reads the project's documentation for tests: README.md
// (what Dwara is, "Start here", the map) and the pages of docs/, which
// hold every other section. Tests that check the documentation against
// the code (a metric documented, a command that runs verbatim, an alert
// with a runbook) find a section wherever it lives.
package testdocs

import (
	"cmp"
	"fmt"
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

// Block is a fenced block of the documentation.
type Block struct {
	File    string // relative to the module's directory, as in Files
	Line    int    // of the opening fence, from 1
	Lang    string // the info string: sh, yaml, json, or "" for none
	Heading string // the nearest heading above it ("### Ramp weights"), "" for none
	// Marker is what the HTML comment on the last non-blank line before the
	// opening fence says after "example:" ("not run: needs a Kubernetes
	// cluster", "fragment"), trimmed; "" when there is no such comment.
	Marker string
	Text   string // the lines between the fences, each ending in "\n"
}

// String names the block for a test's message: "docs/api.md:44 (sh)".
func (b Block) String() string {
	return fmt.Sprintf("%s:%d (%s)", b.File, b.Line, cmp.Or(b.Lang, "no language"))
}

// FencedBlocks returns every fenced block (``` to ```) of the files of
// Files, in order. An unclosed fence fails the test.
func FencedBlocks(t testing.TB, root string) []Block {
	t.Helper()
	var blocks []Block
	for _, f := range Files(t, root) {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		var (
			open            *Block
			heading, before string
		)
		for i, line := range strings.Split(string(data), "\n") {
			if open != nil {
				if strings.TrimSpace(line) == "```" {
					blocks = append(blocks, *open)
					open = nil
				} else {
					open.Text += line + "\n"
				}
				continue
			}
			if info, ok := strings.CutPrefix(line, "```"); ok {
				open = &Block{File: f, Line: i + 1, Lang: strings.TrimSpace(info), Heading: heading, Marker: marker(before)}
				continue
			}
			if strings.HasPrefix(line, "#") && strings.Contains(line, "# ") {
				heading = line
			}
			if strings.TrimSpace(line) != "" {
				before = line
			}
		}
		if open != nil {
			t.Fatalf("%s: the fence opened at line %d is never closed", f, open.Line)
		}
	}
	return blocks
}

// marker returns what an "<!-- example: ... -->" line says, or "".
func marker(line string) string {
	s, ok := strings.CutPrefix(strings.TrimSpace(line), "<!--")
	if !ok {
		return ""
	}
	s, ok = strings.CutSuffix(s, "-->")
	if !ok {
		return ""
	}
	s, ok = strings.CutPrefix(strings.TrimSpace(s), "example:")
	if !ok {
		return ""
	}
	return strings.TrimSpace(s)
}
