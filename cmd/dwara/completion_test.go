package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// The bash completion script, sourced in a real bash, completes commands,
// a command's flags (global ones after the verb and before it), file
// names after -f, and the shells of completion; zsh's and fish's parse in
// their shells where those are installed.
func TestCompletion(t *testing.T) {
	t.Parallel()
	code, script, errOut := runBinary(t, nil, "completion", "bash")
	if code != 0 || errOut != "" {
		t.Fatalf("completion bash: exit %d, %s", code, errOut)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "dwara.bash")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "spec.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) []string {
		t.Helper()
		// COMP_WORDS as bash splits the line; the last word is the one
		// being completed.
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		sh := "source " + file + "; cd " + dir + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "; _dwara; printf '%s\\n' \"${COMPREPLY[@]}\""
		out, err := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.Fields(string(out))
	}
	for _, tt := range []struct {
		words []string
		want  []string
	}{
		{[]string{"dwara", "fl"}, []string{"flip"}},
		{[]string{"dwara", "co"}, []string{"completion", "config"}},
		{[]string{"dwara", "flip", "--if"}, []string{"--if-match"}},
		{[]string{"dwara", "--context", "prod", "history", "--cur"}, []string{"--cursor"}},
		{[]string{"dwara", "serve", "--dem"}, []string{"--demo", "--demo-ports"}},
		{[]string{"dwara", "apply", "-f", "sp"}, []string{"spec.yaml"}},
		{[]string{"dwara", "completion", ""}, []string{"bash", "zsh", "fish"}},
		{[]string{"dwara", "history", "-o", "w"}, nil},
	} {
		if got := complete(tt.words...); strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("completing %q: %q, want %q", tt.words, got, tt.want)
		}
	}
	for _, shell := range []string{"zsh", "fish"} {
		code, script, errOut := runBinary(t, nil, "completion", shell)
		if code != 0 || errOut != "" || !strings.Contains(script, "flip") {
			t.Errorf("completion %s: exit %d, %s", shell, code, errOut)
			continue
		}
		path, err := exec.LookPath(shell)
		if err != nil {
			t.Logf("no %s here: its script is not parsed", shell)
			continue
		}
		f := filepath.Join(dir, "dwara."+shell)
		if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(t.Context(), path, "-n", f).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", shell, err, out)
		}
	}
	if code, _, errOut := runBinary(t, nil, "completion", "tcsh"); code != 2 || !strings.Contains(errOut, `bash, zsh or fish, not "tcsh"`) {
		t.Errorf("completion tcsh: exit %d, %s", code, errOut)
	}
}

// version -o json: the version, the Go version and the platform.
func TestVersionJSON(t *testing.T) {
	t.Parallel()
	code, out, errOut := runBinary(t, nil, "version", "-o", "json")
	var v map[string]string
	if code != 0 || errOut != "" || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("version -o json: exit %d, %q, %s", code, out, errOut)
	}
	if v["version"] == "" || v["go"] != runtime.Version() || v["platform"] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version -o json = %v", v)
	}
}
