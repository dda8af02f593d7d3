package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
)

// TestBuildInfo checks that serve and gateway report the linked version on
// /healthz and as dwara_build_info on /metrics.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	fetch := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	want := `dwara_build_info{version="` + testVersion + `"} 1`
	s := startProc(t, "serve", "--database-url", dbtest.New(t), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	_, m := s.log.waitFor(t, 0, regexp.MustCompile(`^    API        http://(\S+)/api/v1/generations$`))
	if got := fetch("http://" + m[1] + "/healthz"); !strings.Contains(got, `"version":"`+testVersion+`"`) {
		t.Errorf("serve /healthz: %s", got)
	}
	if got := fetch("http://" + m[1] + "/metrics"); !strings.Contains(got, want) {
		t.Errorf("serve /metrics lacks %s", want)
	}
	s.signal(t, syscall.SIGTERM)
	s.exitCode(t)

	file := filepath.Join(t.TempDir(), "f.yaml")
	os.WriteFile(file, []byte(binarySpec), 0o644)
	g := startProc(t, "gateway", "--config", file, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
	_, m = g.log.waitFor(t, 0, listeningRe)
	if got := fetch("http://" + m[2] + "/healthz"); !strings.Contains(got, `"version":"`+testVersion+`"`) {
		t.Errorf("gateway /healthz: %s", got)
	}
	if got := fetch("http://" + m[2] + "/metrics"); !strings.Contains(got, want) {
		t.Errorf("gateway /metrics lacks %s", want)
	}
}
