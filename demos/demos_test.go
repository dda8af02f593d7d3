//go:build unix

// Package demos runs the demo scripts of this directory (README.md) as
// end-to-end tests: each one normally, where it must exit 0 and say PASS,
// and with DEMO_BREAK=1, where it runs against a deliberately wrong spec
// or setup and must exit 1 with its own failure message. A demo that
// exits 2 failed to set itself up, which fails the test either way.
//
// The binaries (bin: dwara, demos/upstream) are built once. Demos 07-11
// need PostgreSQL: DWARA_TEST_DATABASE_URL, when set, is handed to them as
// DWARA_DATABASE_URL (each makes and drops a database of its own there),
// else they find a server with scripts/postgres.sh. The whole takes about
// a minute; every script runs under a deadline.
package demos

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scenario is one demo script and what its broken run must say.
type scenario struct {
	name string
	// needs are commands the script needs beyond bash, curl and awk.
	needs []string
	// broken is the failure message (after "FAIL: NAME: ") of the run with
	// DEMO_BREAK=1, or a prefix of it.
	broken string
}

var scenarios = []scenario{
	{name: "01-round-robin", broken: "round robin is not even"},
	{name: "02-least-conn", broken: "least_conn did not spare the slow endpoint"},
	{name: "03-ip-hash", broken: "ip_hash did not keep clients on one endpoint"},
	{name: "04-peak-ewma", broken: "peak_ewma did not spare the slow endpoint"},
	{name: "05-sticky-sessions", broken: "sessions did not stick"},
	{name: "06-traffic-split", broken: "the realised split is not 90/10"},
	{name: "07-blue-green-flip", needs: []string{"psql"}, broken: "requests failed during the flip: "},
	{name: "08-canary-rollback", needs: []string{"psql", "jq"}, broken: "the canary was not rolled back within"},
	{name: "09-rollback", needs: []string{"psql", "jq"}, broken: "after the rollback only 0 of 50 requests"},
	{name: "10-canary-schedule", needs: []string{"psql", "jq"}, broken: "the canary did not wait at the gate before 100"},
	{name: "11-model-canary", needs: []string{"psql", "jq"}, broken: "the canary of llm/summarize was rolled back"},
}

// scriptDeadline bounds one run of one script (the slowest, a broken
// 08-canary-rollback, takes about 20 s).
const scriptDeadline = 2 * time.Minute

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// needTools skips t unless every command is on PATH.
func needTools(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("the demos need %s on PATH; skipped", c)
		}
	}
}

// binaries builds dwara and demos/upstream once and returns their paths.
func binaries(t *testing.T) (dwara, upstream string) {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "dwara-demos-test-")
		if buildErr != nil {
			return
		}
		for pkg, out := range map[string]string{"./cmd/dwara": "dwara", "./demos/upstream": "upstream"} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, out), pkg)
			cmd.Dir = ".."
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = errors.New("go build " + pkg + ": " + err.Error() + "\n" + string(b))
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "dwara"), filepath.Join(binDir, "upstream")
}

// run runs a script of this directory with args under scriptDeadline, in
// a process group of its own, and returns its exit code and output. On the
// deadline the group gets SIGTERM (the script stops what it started), and
// SIGKILL 40 s later; whatever is left of the group is killed at the end.
func run(t *testing.T, broken bool, script string, args ...string) (int, string) {
	t.Helper()
	dwara, upstream := binaries(t)
	ctx, cancel := context.WithTimeout(t.Context(), scriptDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "./"+script, args...)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "DEMO_BREAK=")
	})
	brk := "0"
	if broken {
		brk = "1"
	}
	env = append(env, "DWARA_BIN="+dwara, "DEMO_UPSTREAM_BIN="+upstream, "DEMO_BREAK="+brk)
	if u := os.Getenv("DWARA_TEST_DATABASE_URL"); u != "" && os.Getenv("DWARA_DATABASE_URL") == "" {
		env = append(env, "DWARA_DATABASE_URL="+u)
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 40 * time.Second
	start := time.Now()
	err := cmd.Start()
	if err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	err = cmd.Wait()
	t.Logf("%s (DEMO_BREAK=%v) ran %.1fs", script, broken, time.Since(start).Seconds())
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %v:\n%s", script, scriptDeadline, out.String())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String()
	}
	t.Fatalf("%s: %v\n%s", script, err, out.String())
	return 0, ""
}

// TestDemos runs every demo normally and broken. The runs go beside one
// another and beside TestRunAll and TestShellcheck, at most -parallel at
// once: each run of a script picks free ports, works in a directory of its
// own and makes a database of its own.
func TestDemos(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "awk")
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			needTools(t, s.needs...)
			t.Run("works", func(t *testing.T) {
				t.Parallel()
				code, out := run(t, false, s.name)
				if code != 0 || !strings.Contains(out, "\nPASS: "+s.name+": ") {
					t.Fatalf("%s exited %d, want 0 and a PASS line:\n%s", s.name, code, out)
				}
				t.Log(lastLine(out, "PASS: "))
			})
			t.Run("broken", func(t *testing.T) {
				t.Parallel()
				code, out := run(t, true, s.name)
				want := "FAIL: " + s.name + ": " + s.broken
				if code != 1 || !strings.Contains(out, want) {
					t.Fatalf("%s with DEMO_BREAK=1 exited %d, want 1 and %q:\n%s", s.name, code, want, out)
				}
				t.Log(lastLine(out, "FAIL: "))
			})
		})
	}
}

// TestEveryDemoIsTested keeps scenarios in step with the scripts here.
func TestEveryDemoIsTested(t *testing.T) {
	files, err := filepath.Glob("[0-9][0-9]-*")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	slices.Sort(files)
	if !slices.Equal(files, names) {
		t.Fatalf("demo scripts %v, but the test knows %v", files, names)
	}
}

// TestRunAll runs run-all on one demo: it reports the outcome and the
// count, and exits 0.
func TestRunAll(t *testing.T) {
	t.Parallel()
	needTools(t, "bash", "curl", "awk", "timeout")
	code, out := run(t, false, "run-all", "01-round-robin")
	if code != 0 || !strings.Contains(out, "\n01-round-robin ") || !strings.Contains(out, "demos: 1 passed, 0 failed") {
		t.Fatalf("run-all 01-round-robin exited %d, want 0 with its outcome and \"1 passed, 0 failed\":\n%s", code, out)
	}
	if strings.Contains(out, "building ") {
		t.Errorf("run-all built the binaries although DWARA_BIN and DEMO_UPSTREAM_BIN were set:\n%s", out)
	}
}

// TestShellcheck checks every script with shellcheck, when it is installed.
func TestShellcheck(t *testing.T) {
	t.Parallel()
	needTools(t, "shellcheck")
	files, err := filepath.Glob("[0-9][0-9]-*")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "run-all", "lib.sh")
	cmd := exec.CommandContext(t.Context(), "shellcheck", append([]string{"-x"}, files...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}

// lastLine returns the last line of out that starts with prefix.
func lastLine(out, prefix string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], prefix) {
			return lines[i]
		}
	}
	return ""
}
