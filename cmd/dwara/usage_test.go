package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// runBinary runs the binary with args and the environment extended by env
// (DWARA_DATABASE_URL and DWARA_API_URL cleared first), and returns its exit
// code, stdout and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), binary, args...)
	cmd.Env = append(append(os.Environ(), "DWARA_DATABASE_URL=", "DWARA_API_URL=http://127.0.0.1:1"), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run dwara: %v", err)
	}
	return code, out.String(), errOut.String()
}

// TestUsage checks the one usage style of every command: --help prints the
// usage on stdout and exits 0; a usage mistake prints "dwara COMMAND:
// problem" and the usage on stderr, exits 2 and logs nothing.
func TestUsage(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(file, []byte(binarySpec), 0o644); err != nil {
		t.Fatal(err)
	}
	mistakes := []struct {
		args []string
		want string // the problem, after "dwara COMMAND: "
	}{
		{[]string{"serve", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"serve"}, "no database: give --database-url URL or set DWARA_DATABASE_URL"},
		{[]string{"serve", "--database-url", "postgres://x/y", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--database-url", "postgres://x/y", "--reset"}, "--reset goes with --demo"},
		{[]string{"serve", "--database-url", "postgres://x/y", "--log-format", "xml"}, `--log-format "xml": want text or json`},
		{[]string{"serve", "--listen"}, "flag needs an argument: --listen"},
		{[]string{"serve", "--database-url", "postgres://x/y", "--front", "nginx"}, `--front "nginx": want fasthttp or net/http`},
		{[]string{"gateway"}, "give --config FILE, --database-url URL (or set DWARA_DATABASE_URL) or --control-plane URL"},
		{[]string{"gateway", "--config", file, "--control-plane", "http://127.0.0.1:9090"}, "give only one of --config, --database-url and --control-plane"},
		{[]string{"gateway", "--control-plane", "ftp://x"}, `--control-plane: "ftp://x": the scheme must be http or https`},
		{[]string{"gateway", "--config", file, "--control-plane-token-file", file}, "--control-plane-token-file goes with --control-plane"},
		{[]string{"gateway", "--config", file, "--tls-cert", "c.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"gateway", "--config", file, "--front", "nginx"}, `--front "nginx": want fasthttp or net/http`},
		{[]string{"gateway", "--config", file, "--http2", "h2o"}, `--http2 "h2o": want dwara or net/http`},
		{[]string{"gateway", "--config", file, "--front", "net/http", "--http2", "dwara"}, "--http2 dwara: the net/http front serves HTTP/2 itself (Go's server); --http2 chooses the server of --front fasthttp"},
		{[]string{"gateway", "--config", file, "--front", "loop"}, "--front loop: the loop front was removed (it served no faster than fasthttp over the benchmark's workload matrix); use fasthttp, the default, or net/http"},
		{[]string{"migrate"}, "no database: give --database-url URL or set DWARA_DATABASE_URL"},
		{[]string{"health", "--url", "ftp://x"}, `--url "ftp://x": want http(s)://HOST:PORT[/PATH]`},
		{[]string{"health", "--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"version", "now"}, `unexpected argument "now"`},
		{[]string{"history", "--limit", "0"}, "--limit must be from 1 to 500, not 0"},
		{[]string{"history", "--actor", "bob"}, "flag provided but not defined: --actor"},
	}
	for _, tt := range mistakes {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runBinary(t, nil, tt.args...)
			first, rest, _ := strings.Cut(errOut, "\n")
			if code != 2 || out != "" || first != "dwara "+tt.args[0]+": "+tt.want || !strings.HasPrefix(rest, "usage: dwara "+tt.args[0]) {
				t.Errorf("want exit 2, \"dwara %s: %s\" and the usage on stderr; got exit %d\nstdout:\n%s\nstderr:\n%s",
					tt.args[0], tt.want, code, out, errOut)
			}
			if strings.Contains(errOut, "level=") {
				t.Errorf("a usage mistake logged:\n%s", errOut)
			}
		})
	}

	for _, args := range [][]string{
		{"serve", "--help"}, {"serve", "-h"}, {"gateway", "--help"}, {"migrate", "--help"}, {"health", "--help"},
		{"version", "--help"}, {"flip", "--help"}, {"help", "serve"}, {"help", "history"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			verb := args[0]
			if verb == "help" {
				verb = args[1]
			}
			code, out, errOut := runBinary(t, nil, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "usage: dwara "+verb) {
				t.Errorf("want exit 0 and the usage of %s on stdout; got exit %d\nstdout:\n%s\nstderr:\n%s", verb, code, out, errOut)
			}
			if verb != "version" && !strings.Contains(out, "\nFlags:\n") {
				t.Errorf("the usage lists no flags:\n%s", out)
			}
		})
	}
	t.Run("help", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
			code, out, errOut := runBinary(t, nil, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "  dwara serve   [flags]") || !strings.Contains(out, "  dwara version ") {
				t.Errorf("dwara %s: exit %d\nstdout:\n%s\nstderr:\n%s", args[0], code, out, errOut)
			}
		}
		code, out, errOut := runBinary(t, nil)
		if code != 2 || out != "" || !strings.Contains(errOut, "  dwara serve   [flags]") {
			t.Errorf("dwara without a command: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
	})
}

// TestUnknownCommand checks that an unknown command names the close one
// when it looks like a typo.
func TestUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ cmd, want string }{
		{"flpi", `dwara: unknown command "flpi"; did you mean "flip"?`},
		{"srve", `dwara: unknown command "srve"; did you mean "serve"?`},
		{"histroy", `dwara: unknown command "histroy"; did you mean "history"?`},
		{"--verison", `dwara: unknown command "--verison"; did you mean "version"?`},
		{"xyzzy", `dwara: unknown command "xyzzy"`},
		{"s", `dwara: unknown command "s"`},
	} {
		code, out, errOut := runBinary(t, nil, tt.cmd)
		if code != 2 || out != "" || errOut != tt.want+"\nRun \"dwara help\" for the list of commands.\n" {
			t.Errorf("dwara %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tt.cmd, code, out, errOut, tt.want)
		}
	}
	for _, help := range []string{"help", "--help"} {
		code, _, errOut := runBinary(t, nil, help, "flpi")
		if code != 2 || !strings.Contains(errOut, `did you mean "flip"?`) {
			t.Errorf("dwara %s flpi: exit %d, stderr %q", help, code, errOut)
		}
	}
}

// TestVersion checks `dwara version` and --version against the version the
// test binary was linked with.
func TestVersion(t *testing.T) {
	t.Parallel()
	want := "dwara " + testVersion + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := runBinary(t, nil, args...)
		if code != 0 || out != want || errOut != "" {
			t.Errorf("dwara %s: exit %d, stdout %q, stderr %q; want %q", args[0], code, out, errOut, want)
		}
	}
}

// TestVersionOf checks where the version comes from without the linker's:
// the module version, else the VCS revision, else "devel".
func TestVersionOf(t *testing.T) {
	t.Parallel()
	bi := func(v string, settings ...string) *debug.BuildInfo {
		b := &debug.BuildInfo{Main: debug.Module{Path: "github.com/dwara/dwara", Version: v}}
		for i := 0; i+1 < len(settings); i += 2 {
			b.Settings = append(b.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return b
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	for _, tt := range []struct {
		name   string
		ldflag string
		bi     *debug.BuildInfo
		ok     bool
		want   string
	}{
		{"the linker's version wins", "v1.2.3-4-gabc", bi("v9.9.9"), true, "v1.2.3-4-gabc"},
		{"go install of a module version", "", bi("v1.2.3"), true, "v1.2.3"},
		{"a clean work tree", "", bi("(devel)", "vcs.revision", rev, "vcs.modified", "false"), true, "0123456789ab"},
		{"a modified work tree", "", bi("(devel)", "vcs.revision", rev, "vcs.modified", "true"), true, "0123456789ab-dirty"},
		{"no VCS information", "", bi("(devel)"), true, "devel"},
		{"no build information", "", nil, false, "devel"},
	} {
		if got := versionOf(tt.ldflag, tt.bi, tt.ok); got != tt.want {
			t.Errorf("%s: versionOf = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestSuggest checks the typo rule of unknown commands directly.
func TestSuggest(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"flpi": "flip", "flip": "flip", "wieghts": "weights", "rolback": "rollback", "gatway": "gateway",
		"migarte": "migrate", "statu": "", "x": "", "": "", "canry": "canary", "heath": "health",
	} {
		if got := suggest(in); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
