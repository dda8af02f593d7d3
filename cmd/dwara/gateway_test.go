package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// binary is the dwara executable built once by TestMain, with testVersion
// as its version.
var binary string

// testVersion is the version TestMain builds the binary with, as make's
// -ldflags "-X main.version=..." does.
const testVersion = "v0.0.0-test"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "dwara-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, "build dwara:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "dwara")
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+testVersion, "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build dwara:", err)
		return 1
	}
	return m.Run()
}

// wait bounds every wait for the process (a log line, its exit) and every
// request to it. A passing test never waits this long; it is generous so
// that a loaded machine running -race never reaches it.
const wait = 30 * time.Second

// logTail collects a process's stderr line by line and wakes waiters on
// every new line. It is safe for concurrent use.
type logTail struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	closed  bool
	changed chan struct{} // closed and replaced on every new line or close
}

func newLogTail() *logTail { return &logTail{changed: make(chan struct{})} }

// Write splits p into lines; exec.Cmd copies stderr into it.
func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	grew := false
	for {
		i := strings.IndexByte(string(l.partial), '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		grew = true
	}
	if grew {
		l.wake()
	}
	return len(p), nil
}

// close marks the end of the output (the process has exited).
func (l *logTail) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.partial) > 0 {
		l.lines = append(l.lines, string(l.partial))
		l.partial = nil
	}
	l.closed = true
	l.wake()
}

func (l *logTail) wake() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// mark is the number of lines so far: waits from it see only later lines.
func (l *logTail) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lines)
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + string(l.partial)
}

// since returns the lines from mark on.
func (l *logTail) since(mark int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines[mark:], "\n")
}

// waitFor waits for the first line at or after from that matches re, and
// returns its index and submatches.
func (l *logTail) waitFor(t *testing.T, from int, re *regexp.Regexp) (int, []string) {
	t.Helper()
	deadline := time.After(wait)
	for {
		l.mu.Lock()
		for i := from; i < len(l.lines); i++ {
			if m := re.FindStringSubmatch(l.lines[i]); m != nil {
				l.mu.Unlock()
				return i, m
			}
		}
		from = len(l.lines)
		closed, changed := l.closed, l.changed
		l.mu.Unlock()
		if closed {
			t.Fatalf("process exited without logging a line matching %s; stderr:\n%s", re, l)
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no log line matching %s within %v; stderr:\n%s", re, wait, l)
		}
	}
}

// gatewayProc is a running `dwara gateway`.
type gatewayProc struct {
	cmd     *exec.Cmd
	log     *logTail
	exited  chan struct{} // closed once Wait returned
	waitErr error         // valid after exited is closed
}

// startProc runs the binary with args and collects its stderr. The process
// is killed at the end of the test if it is still running.
func startProc(t *testing.T, args ...string) *gatewayProc {
	t.Helper()
	p := &gatewayProc{log: newLogTail(), exited: make(chan struct{})}
	p.cmd = exec.Command(binary, args...)
	// A database URL from the environment must not change what is tested,
	// and info lines are what the test reads.
	p.cmd.Env = append(os.Environ(), "DWARA_DATABASE_URL=", "DWARA_LOG_LEVEL=info")
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start dwara: %v", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		p.log.close()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = p.cmd.Process.Kill()
		select {
		case <-p.exited:
		case <-time.After(wait):
			t.Errorf("dwara (pid %d) did not exit after kill", p.cmd.Process.Pid)
		}
	})
	return p
}

// exitCode waits for the process to exit and returns its exit code.
func (p *gatewayProc) exitCode(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(wait):
		t.Fatalf("dwara did not exit within %v; stderr:\n%s", wait, p.log)
	}
	var ee *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &ee) {
		t.Fatalf("wait for dwara: %v", p.waitErr)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *gatewayProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("send %v to dwara: %v", sig, err)
	}
}

var (
	listeningRe = regexp.MustCompile(`msg="gateway listening" proxy=(\S+) metrics=http://(\S+)/metrics`)
	appliedRe   = regexp.MustCompile(`msg="generation applied" .*generation=(\d+)`)
	refusedRe   = regexp.MustCompile(`level=ERROR msg="spec file refused; the current generation keeps serving"`)
	reloadRe    = regexp.MustCompile(`level=INFO msg="reload requested"`)
)

// replaceFile writes content to a temporary file and renames it over path.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// get sends one request and returns the status, the X-Pool header and the
// body.
func get(t *testing.T, c *http.Client, url string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, resp.Header.Get("X-Pool"), string(body)
}

// expectPool sends n requests and checks that every one is served by pool.
func expectPool(t *testing.T, c *http.Client, url, pool string, n int) {
	t.Helper()
	got := map[string]int{}
	for range n {
		code, p, body := get(t, c, url)
		if code != http.StatusOK {
			t.Fatalf("GET %s: status %d: %s", url, code, body)
		}
		got[p]++
	}
	if got[pool] != n {
		t.Errorf("requests by pool = %v, want all %d by %s", got, n, pool)
	}
}

// readyz returns the generation /readyz reports; it must answer 200.
func readyz(t *testing.T, c *http.Client, base string) int64 {
	t.Helper()
	code, _, body := get(t, c, base+"/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz: status %d: %s", code, body)
	}
	var r struct {
		Status     string `json:"status"`
		Generation int64  `json:"generation"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("/readyz: %v in %q", err, body)
	}
	if r.Status != "ready" {
		t.Errorf("/readyz status = %q, want ready", r.Status)
	}
	return r.Generation
}

func TestGatewayFromFile(t *testing.T) {
	t.Parallel()
	blue, err := demo.StartPool("blue", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(blue.Close)
	green, err := demo.StartPool("green", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(green.Close)

	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte(spectest.SplitOver([]*demo.Pool{blue, green}, 100, 0).YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "gateway", "--config", file, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	_, m := p.log.waitFor(t, 0, listeningRe)
	proxyURL, metricsURL := "http://"+m[1]+"/", "http://"+m[2]
	c := &http.Client{Timeout: wait}
	t.Cleanup(c.CloseIdleConnections)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dwara stderr:\n%s", p.log)
		}
	})
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // later steps build on this one
		}
	}

	step("serves the file's split", func(t *testing.T) {
		if _, m := p.log.waitFor(t, 0, appliedRe); m[1] != "1" {
			t.Errorf("first generation = %s, want 1", m[1])
		}
		expectPool(t, c, proxyURL, "blue", 40)
		if _, _, body := get(t, c, proxyURL); !strings.Contains(body, " generation=1 ") {
			t.Errorf("upstream saw %q, want X-Dwara-Generation 1", body)
		}
	})

	step("file change switches the split", func(t *testing.T) {
		mark := p.log.mark()
		if err := os.WriteFile(file, []byte(spectest.SplitOver([]*demo.Pool{blue, green}, 0, 100).YAML()), 0o644); err != nil {
			t.Fatal(err)
		}
		// A write in place may be seen half-done and refused first; the
		// complete file is then applied as generation 2. A request sent
		// after the process logged that is served by it.
		if _, m := p.log.waitFor(t, mark, appliedRe); m[1] != "2" {
			t.Errorf("generation after the change = %s, want 2", m[1])
		}
		expectPool(t, c, proxyURL, "green", 40)
	})

	step("broken file keeps the old split", func(t *testing.T) {
		mark := p.log.mark()
		broken := spectest.SplitOver([]*demo.Pool{blue, green}, 100, 0).
			Edit(func(s *config.Spec) { s.Services[0].Split.Targets[1].Upstream = "gren" }).YAML()
		replaceFile(t, file, broken)
		p.log.waitFor(t, mark, refusedRe)
		const want = `msg="spec file error" file=` + "%s" + ` path=services[0].split.targets[1].upstream error="unknown upstream \"gren\"; did you mean \"green\"?"`
		if logged := p.log.since(mark); !strings.Contains(logged, fmt.Sprintf(want, file)) {
			t.Errorf("stderr does not name the field path of the error; got:\n%s", logged)
		}
		expectPool(t, c, proxyURL, "green", 40)
		if g := readyz(t, c, metricsURL); g != 2 {
			t.Errorf("/readyz generation = %d, want 2 (the refused file applied nothing)", g)
		}
	})

	step("SIGHUP reloads a change", func(t *testing.T) {
		mark := p.log.mark()
		replaceFile(t, file, spectest.SplitOver([]*demo.Pool{blue, green}, 100, 0).YAML())
		p.signal(t, syscall.SIGHUP)
		i, _ := p.log.waitFor(t, mark, reloadRe)
		// The file event may apply the change first; the SIGHUP reload is
		// then a forced re-apply. Either way a generation of the changed
		// file follows it, and requests sent after it are served by blue.
		p.log.waitFor(t, i+1, appliedRe)
		expectPool(t, c, proxyURL, "blue", 40)
	})

	step("SIGHUP forces unchanged content", func(t *testing.T) {
		before := readyz(t, c, metricsURL)
		mark := p.log.mark()
		p.signal(t, syscall.SIGHUP)
		i, _ := p.log.waitFor(t, mark, reloadRe)
		if _, m := p.log.waitFor(t, i+1, appliedRe); m[1] != strconv.FormatInt(before+1, 10) {
			t.Errorf("generation after SIGHUP = %s, want %d", m[1], before+1)
		}
		if g := readyz(t, c, metricsURL); g != before+1 {
			t.Errorf("/readyz generation = %d, want %d", g, before+1)
		}
		expectPool(t, c, proxyURL, "blue", 40)
	})

	step("readyz and metrics", func(t *testing.T) {
		g := readyz(t, c, metricsURL)
		if code, _, body := get(t, c, metricsURL+"/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: status %d: %s", code, body)
		}
		code, _, body := get(t, c, metricsURL+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: status %d", code)
		}
		if want := fmt.Sprintf("\ndwara_generation_active %d\n", g); !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
		for _, name := range []string{"dwara_split_picks_total", "dwara_requests_total"} {
			if !strings.Contains(body, "\n"+name+"{") {
				t.Errorf("/metrics lacks %s", name)
			}
		}
	})

	step("SIGTERM stops it with exit code 0", func(t *testing.T) {
		c.CloseIdleConnections()
		mark := p.log.mark()
		p.signal(t, syscall.SIGTERM)
		if code := p.exitCode(t); code != 0 {
			t.Errorf("exit code after SIGTERM = %d, want 0; stderr:\n%s", code, p.log)
		}
		if !regexp.MustCompile(`(?m)^time=\S+ level=INFO msg="dwara stopped"$`).MatchString(p.log.since(mark)) {
			t.Errorf("no \"dwara stopped\" line after a graceful shutdown; stderr:\n%s", p.log.since(mark))
		}
	})
}

func TestGatewayRefusesBadStart(t *testing.T) {
	t.Parallel()
	unknown := `upstreams:
  - name: blue
    endpoints: ["127.0.0.1:1"]
services:
  - name: web
    base_path: /
    upstream: bleu
`
	tests := []struct {
		name    string
		content *string // nil: no file is written
		args    func(file string) []string
		want    string // in stderr
	}{
		{
			name: "missing file",
			args: func(file string) []string { return []string{"gateway", "--config", file} },
			want: "no such file or directory",
		},
		{
			name:    "invalid spec",
			content: &unknown,
			args:    func(file string) []string { return []string{"gateway", "--config", file} },
			want:    `path=services[0].upstream error="unknown upstream \"bleu\"; did you mean \"blue\"?"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "f.yaml")
			if tt.content != nil {
				if err := os.WriteFile(file, []byte(*tt.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := append(tt.args(file), "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
			p := startProc(t, args...)
			if code := p.exitCode(t); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
			logged := p.log.String()
			if !strings.Contains(logged, tt.want) {
				t.Errorf("stderr lacks %q:\n%s", tt.want, logged)
			}
			if !strings.Contains(logged, `msg="dwara stopped"`) {
				t.Errorf("stderr lacks the stop line:\n%s", logged)
			}
		})
	}
}
