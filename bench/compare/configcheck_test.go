package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestConfigsPassTheToolsOwnCheck renders every nginx and HAProxy
// configuration, for every workload, as a run does (a directory of its
// own, the run's certificate) and has the installed binary check it:
// `nginx -t`, `haproxy -c`, the same checks launch runs before starting
// one. What this HAProxy cannot serve (skipReason) is left out. Skipped
// for a tool that is not installed.
func TestConfigsPassTheToolsOwnCheck(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cert, err := makeCert(filepath.Join(root, "tls"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, argv ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Errorf("%v: %v\n%s", argv, err, out)
		}
	}
	for _, tool := range []string{"nginx", "haproxy"} {
		bin, err := exec.LookPath(tool)
		if err != nil {
			t.Run(tool, func(t *testing.T) { t.Skipf("%s is not installed", tool) })
			continue
		}
		b := &bench{}
		if tool == "haproxy" {
			vv, _ := exec.Command(bin, "-vv").Output()
			b.haproxy = parseHAProxyCaps(vv)
		}
		for _, c := range contestants {
			if c.tool != tool || c.conf != c.name {
				continue
			}
			for _, w := range workloads {
				t.Run(c.name+"/"+w.name, func(t *testing.T) {
					if why := b.skipReason(c, w); why != "" {
						t.Skip(why)
					}
					dir := filepath.Join(root, fmt.Sprintf("round1-%s-%s", w.name, c.name))
					if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
						t.Fatal(err)
					}
					port, err := freePort()
					if err != nil {
						t.Fatal(err)
					}
					text, err := render(c.conf, proxyConf{Listen: port, Pools: pools{Stable: [2]int{40001, 40002}, Canary: [2]int{40003, 40004}},
						CanaryPercent: 5, Dir: dir, User: nginxUser(), Workload: w, Cert: cert})
					if err != nil {
						t.Fatal(err)
					}
					file := filepath.Join(dir, c.tool+".conf")
					if err := os.WriteFile(file, text, 0o644); err != nil {
						t.Fatal(err)
					}
					if tool == "nginx" {
						check(t, bin, "-p", dir, "-c", file, "-e", filepath.Join(dir, "error.log"), "-t", "-q")
					} else {
						check(t, bin, "-c", "-q", "-f", file)
					}
				})
			}
		}
	}
}
