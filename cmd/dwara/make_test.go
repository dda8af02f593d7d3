package main

import (
	"bytes"
	"fmt"
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
// the repository has: sections of README.md and of the docs/ pages (as
// `docs/page.md, "Section"`), not a DESIGN.md it does not have.
func TestDocReferences(t *testing.T) {
	t.Parallel()
	cite := regexp.MustCompile(`\b(README|docs/[a-z0-9-]+)(?:\.md)?, "([^"]+)"`)
	files, _ := filepath.Glob("../../scripts/*.sh")
	files = append(files, "../../Makefile", "../../Dockerfile", "../../docker-compose.yml", "../../.ci/run")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "DESIGN.md") {
			t.Errorf("%s cites DESIGN.md, which the repository does not have", f)
		}
		for _, m := range cite.FindAllStringSubmatch(string(data), -1) {
			doc, err := os.ReadFile("../../" + m[1] + ".md")
			if err != nil {
				t.Errorf("%s cites %s.md, which the repository does not have", f, m[1])
				continue
			}
			if !strings.Contains(string(doc), "\n## "+m[2]+"\n") && !strings.Contains(string(doc), "\n### "+m[2]+"\n") {
				t.Errorf("%s cites section %q of %s.md, which it does not have", f, m[2], m[1])
			}
		}
	}
}

// make run with the demo ports moved (DEMO_PORTS) on a private PostgreSQL
// cluster that scripts/postgres.sh starts (DWARA_PG_PRIVATE: as when
// nothing answers on 5432), then make stop: the serve and the cluster
// stop, and no process of either is left.
func TestMakeRunStop(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if _, err := exec.LookPath("initdb"); err != nil {
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) == 0 {
			t.Skip("no PostgreSQL server binaries for a private cluster")
		}
	}
	state := t.TempDir()
	// The cluster runs as postgres when the tests run as root: it must
	// reach its directory.
	for d := state; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(state, "dwara")
	env := append(os.Environ(), "DWARA_STATE="+state, "DWARA_PG_PRIVATE=1", "DWARA_PG_PORT="+strconv.Itoa(freePort(t)), "DWARA_DATABASE_URL=")
	ports := fmt.Sprintf("%d,%d,%d", freePort(t), freePort(t), freePort(t))
	run := exec.Command("make", "-C", "../..", "run", "BIN="+bin, "DEMO_PORTS="+ports,
		"RUN_FLAGS=--demo --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0")
	run.Env = env
	var log syncBuffer
	run.Stdout, run.Stderr = &log, &log
	run.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	t.Cleanup(func() {
		// Whatever happened, nothing outlives the test.
		_ = syscall.Kill(-run.Process.Pid, syscall.SIGKILL)
		stop := exec.Command("make", "-C", "../..", "stop")
		stop.Env = env
		_ = stop.Run()
	})
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(log.String(), "\n  try:\n") {
		select {
		case err := <-exited:
			t.Fatalf("make run exited (%v) before its banner:\n%s", err, log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner from make run:\n%s", log.String())
		}
	}
	if !strings.Contains(log.String(), "it outlives make run: stop it with make stop") || !strings.Contains(log.String(), "web-canary (127.0.0.1:"+strings.Split(ports, ",")[2]+")") {
		t.Errorf("make run did not say how to stop its cluster, or not the moved demo ports:\n%s", log.String())
	}
	stop := exec.CommandContext(t.Context(), "make", "-C", "../..", "stop")
	stop.Env = env
	if out, err := stop.CombinedOutput(); err != nil || !strings.Contains(string(out), "stopped dwara serve") || !strings.Contains(string(out), "stopped the private PostgreSQL") {
		t.Errorf("make stop: %v\n%s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(time.Minute):
		t.Fatal("make run still runs after make stop")
	}
	// No process names the state directory (the cluster's) or the binary.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && (strings.Contains(string(cmdline), state)) {
			t.Errorf("a process is left after make stop: %s", strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	if _, err := os.Stat(filepath.Join(state, "run.pid")); !os.IsNotExist(err) {
		t.Errorf("run.pid is left after make stop: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
