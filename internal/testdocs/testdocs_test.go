package testdocs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// linkRE finds the Markdown links of a text: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchor is the anchor GitHub gives a heading: lowercase; letters,
// digits, hyphens and underscores kept; spaces made hyphens; everything
// else dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of a Markdown text, outside
// fenced blocks.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if h, ok := strings.CutPrefix(line, "#"); ok && !fence {
			out[anchor(strings.TrimLeft(h, "#"))] = true
		}
	}
	return out
}

// Every relative link of the documentation names a file of the
// repository, and a heading of it when it has an anchor: the split of the
// README into docs/ pages left no link behind.
func TestLinks(t *testing.T) {
	const root = "../.."
	files := Files(t, root)
	if len(files) < 5 {
		t.Fatalf("the documentation has %d files: %v", len(files), files)
	}
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// Links inside fenced blocks are examples, not links.
		var prose strings.Builder
		fence := false
		for line := range strings.Lines(string(data)) {
			if strings.HasPrefix(line, "```") {
				fence = !fence
			} else if !fence {
				prose.WriteString(line)
			}
		}
		for _, m := range linkRE.FindAllStringSubmatch(prose.String(), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.ToSlash(filepath.Join(filepath.Dir(f), path))
			}
			doc, err := os.ReadFile(filepath.Join(root, dest))
			if err != nil {
				if _, serr := os.Stat(filepath.Join(root, dest)); serr != nil {
					t.Errorf("%s links %s: no such file", f, target)
				}
				continue
			}
			if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(string(doc))[frag] {
				t.Errorf("%s links %s: %s has no heading with anchor %q", f, target, dest, frag)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links; the README's map and docs/README.md's contents alone have more", checked)
	}
}

// Section finds a section of a docs/ page, and only up to the next
// section of its level.
func TestSection(t *testing.T) {
	s := Section(t, "../..", "Start here")
	if !strings.Contains(s, "make run") || strings.Contains(s, "\n## ") {
		t.Errorf("README's Start here section is not what Section returns:\n%s", s)
	}
	if m := Section(t, "../..", "Metrics"); !strings.Contains(m, "| `dwara_requests_total") {
		t.Errorf("the Metrics section (docs/) lacks dwara_requests_total:\n%s", m)
	}
}

// TestFencedBlocks reads the blocks of a small tree: language, line,
// heading, the marker before a block and none before another.
func TestFencedBlocks(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Dwara\n\n```sh\nmake run\n```\n")
	write("docs/a.md", "## One\n\ntext\n<!-- example: not run: needs a cluster -->\n\n```yaml\nx: 1\n# not a heading\n```\n### Two\n```\nplain\n```\n")
	got := FencedBlocks(t, root)
	want := []Block{
		{File: "README.md", Line: 3, Lang: "sh", Heading: "# Dwara", Text: "make run\n"},
		{File: "docs/a.md", Line: 6, Lang: "yaml", Heading: "## One", Marker: "not run: needs a cluster", Text: "x: 1\n# not a heading\n"},
		{File: "docs/a.md", Line: 11, Heading: "### Two", Text: "plain\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("blocks %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("block %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
