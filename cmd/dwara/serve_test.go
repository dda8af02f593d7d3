package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// demoPortsFree reports whether the demo pools' fixed ports can be bound.
func demoPortsFree() bool {
	for _, a := range []string{"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9101"} {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

var (
	bannerAdminRe = regexp.MustCompile(`^    API        http://(\S+)/api/v1/generations$`)
	bannerTryRe   = regexp.MustCompile(`^  try:$`)
	bannerDoneRe  = regexp.MustCompile(`--demo --reset \(make demo-reset\)`)
	stoppedRe     = regexp.MustCompile(`level=INFO msg="dwara stopped"$`)
)

// TestServeDemo runs `dwara serve --demo` three times on one database, as
// `make run` would: the first seeds the demo and its banner suggests the
// demo's commands; after a spec without the demo's services is published,
// the second banner says so and suggests --reset instead; `serve --demo
// --reset` publishes the demo spec again on top of the history. Each stops
// on SIGTERM with exit 0 and an INFO "dwara stopped" line.
func TestServeDemo(t *testing.T) {
	if !demoPortsFree() {
		t.Skip("the demo pools' ports 9001, 9002 and 9101 are taken (is make run running?)")
	}
	url := dbtest.New(t)
	serve := func(t *testing.T, wait *regexp.Regexp, extra ...string) (log string, admin string) {
		t.Helper()
		args := append([]string{"serve", "--demo", "--database-url", url, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, extra...)
		p := startProc(t, args...)
		_, m := p.log.waitFor(t, 0, bannerAdminRe)
		p.log.waitFor(t, 0, wait)
		p.signal(t, syscall.SIGTERM)
		if code := p.exitCode(t); code != 0 {
			t.Fatalf("exit code after SIGTERM = %d; stderr:\n%s", code, p.log)
		}
		if !stoppedRe.MatchString(p.log.String()) {
			t.Errorf("no INFO \"dwara stopped\" line; stderr:\n%s", p.log)
		}
		return p.log.String(), m[1]
	}
	contains := func(t *testing.T, log string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(log, w) {
				t.Errorf("stderr lacks %q:\n%s", w, log)
			}
		}
	}

	log, admin := serve(t, bannerTryRe)
	contains(t, log, "  generation 1 is active (create by demo):\n",
		"\n    web   /      web-stable 90 / web-canary 10, sticky\n",
		"\n    "+binary+" flip web --api http://"+admin+"\n")

	// What the walkthrough once did: a spec of its own, without web.
	file := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(file, []byte(strings.NewReplacer("9001", "9301", "9101", "9302").Replace(binarySpec)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "serve", "--database-url", url, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	_, m := p.log.waitFor(t, 0, bannerAdminRe)
	apply := exec.CommandContext(t.Context(), binary, "apply", "-f", file, "--api", "http://"+m[1], "--actor", "test")
	if out, err := apply.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "generation 2 created") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit code = %d; stderr:\n%s", code, p.log)
	}

	log, _ = serve(t, bannerDoneRe)
	contains(t, log, "generation 2 is active (create by ", "\n    api  /  api-stable 95 / api-canary 5\n",
		"no service of generation 2 routes to them")
	if strings.Contains(log, "flip web") || strings.Contains(log, "curl -si") {
		t.Errorf("the banner suggests commands that do not work on generation 2:\n%s", log)
	}

	log, _ = serve(t, bannerTryRe, "--reset")
	contains(t, log, `msg="demo reset: the demo spec is published again" generation=3`,
		"  generation 3 is active (create by demo):\n", "\n    web   /      web-stable 90 / web-canary 10, sticky\n")
	// The history is kept: 1 (seed), 2 (apply), 3 (reset).
	code, out, errOut := runBinary(t, []string{"DWARA_DATABASE_URL=" + url}, "serve", "--demo", "--reset", "--database-url", url,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "extra")
	if code != 2 || out != "" || !strings.HasPrefix(errOut, `dwara serve: unexpected argument "extra"`) {
		t.Errorf("serve with an argument: exit %d, stderr %q", code, errOut)
	}
	log, _ = serve(t, bannerTryRe, "--reset")
	contains(t, log, `msg="demo reset: the active generation already has the demo spec" generation=3`, "  generation 3 is active (create by demo):\n")
}

// TestServeJSONLogs: with --log-format json, serve writes JSON lines only
// (its start is a log line, not the banner), and stops with exit 0.
func TestServeJSONLogs(t *testing.T) {
	url := dbtest.New(t)
	p := startProc(t, "serve", "--log-format", "json", "--database-url", url, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	p.log.waitFor(t, 0, regexp.MustCompile(`"msg":"dwara serve started".*"admin":"127\.0\.0\.1:\d+"`))
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d; stderr:\n%s", code, p.log)
	}
	for _, line := range strings.Split(strings.TrimSpace(p.log.String()), "\n") {
		if !strings.HasPrefix(line, "{") || !strings.HasSuffix(line, "}") {
			t.Errorf("a line that is not JSON: %q", line)
		}
	}
}

// TestServeNetHTTPFront: `serve --front net/http` serves its proxy on the
// net/http front instead of the default fasthttp one (its start line says
// so) and proxies a published spec.
func TestServeNetHTTPFront(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	pool, err := demo.StartPool("blue", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	file := filepath.Join(t.TempDir(), "spec.yaml")
	spec := fmt.Sprintf(`upstreams:
  - {name: blue-1, endpoints: [%q]}
  - {name: blue-2, endpoints: [%q]}
services:
  - name: web
    split:
      targets:
        - {upstream: blue-1, weight: 50}
        - {upstream: blue-2, weight: 50}
`, pool.Addrs[0], pool.Addrs[1])
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}

	p := startProc(t, "serve", "--front", "net/http", "--log-format", "json", "--database-url", url,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	_, m := p.log.waitFor(t, 0, regexp.MustCompile(`"msg":"dwara serve started","proxy":"([^"]+)","admin":"([^"]+)",.*"front":"net/http"`))
	apply := exec.CommandContext(t.Context(), binary, "apply", "-f", file, "--api", "http://"+m[2], "--actor", "test")
	if out, err := apply.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "generation 1 created") {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	expectPool(t, &http.Client{Timeout: wait}, "http://"+m[1]+"/", "blue", 4)
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit code after SIGTERM = %d; stderr:\n%s", code, p.log)
	}
}

// serve --demo --demo-ports starts the demo pools on other ports while the
// default ones are taken: the seeded generation names them, the banner
// says them, and a request through the proxy reaches a pool.
func TestServeDemoPortsMoved(t *testing.T) {
	t.Parallel()
	// Hold 9001 (unless something else already does): the default ports
	// are not free.
	if ln, err := net.Listen("tcp", "127.0.0.1:9001"); err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	var ports []string
	for _, p := range freePorts(t, 3) {
		ports = append(ports, strconv.Itoa(p))
	}
	url := dbtest.New(t)
	p := startProc(t, "serve", "--demo", "--demo-ports", strings.Join(ports, ","), "--database-url", url,
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	// The fail line comes after "try:": wait for it, not for "try:".
	p.log.waitFor(t, 0, regexp.MustCompile(`/fail\?rate=`))
	log := p.log.String()
	want := "  demo pools: web-stable (127.0.0.1:" + ports[0] + ", 127.0.0.1:" + ports[1] + ") and web-canary (127.0.0.1:" + ports[2] + ")\n"
	if !strings.Contains(log, want) || !strings.Contains(log, "curl -s -X POST 'http://127.0.0.1:"+ports[2]+"/fail?rate=0.2'") {
		t.Errorf("the banner does not name the moved pools (%q):\n%s", want, log)
	}
	m := regexp.MustCompile(`(?m)^    proxy      http://(\S+)/$`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no proxy address in the banner:\n%s", log)
	}
	// The proxy applies the seeded generation just after the banner.
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the last answer through the proxy: %s", last)
		}
	})
	testrun.Eventually(t, "a 200 from a moved pool through the proxy", func() bool {
		resp, err := http.Get("http://" + m[1] + "/")
		if err != nil {
			last = err.Error()
			return false
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		return resp.StatusCode == http.StatusOK
	})
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(t); code != 0 {
		t.Errorf("exit code after SIGTERM = %d; stderr:\n%s", code, p.log)
	}
	for _, bad := range []string{"9001,9002", "a,b,c", "1,1,2", "0,1,2"} {
		if code, _, errOut := runBinary(t, nil, "serve", "--demo", "--demo-ports", bad, "--database-url", url); code != 2 || !strings.HasPrefix(errOut, "dwara serve: --demo-ports: ") {
			t.Errorf("--demo-ports %s: exit %d, %s", bad, code, errOut)
		}
	}
	if code, _, errOut := runBinary(t, nil, "serve", "--demo-ports", "1,2,3", "--database-url", url); code != 2 || !strings.Contains(errOut, "--demo-ports goes with --demo") {
		t.Errorf("--demo-ports without --demo: exit %d, %s", code, errOut)
	}
}

// freePorts returns n distinct ports of testnet.FreePort.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		ports = append(ports, testnet.FreePort(t))
	}
	return ports
}
