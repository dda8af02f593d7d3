package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apitest"
)

// binarySpec is a small valid spec in YAML.
const binarySpec = `upstreams:
  - {name: api-stable, endpoints: ["127.0.0.1:9001"]}
  - {name: api-canary, endpoints: ["127.0.0.1:9101"]}
services:
  - name: api
    split:
      targets:
        - {upstream: api-stable, weight: 95}
        - {upstream: api-canary, weight: 5}
`

// TestClientBinary runs the verbs through the built binary, proving main
// dispatches them and passes the environment and exit status through.
func TestClientBinary(t *testing.T) {
	t.Parallel()
	url, _ := apitest.Start(t, "")
	run := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), binary, args...)
		cmd.Env = append(os.Environ(), "DWARA_API_URL="+url, "USER=dora", "DWARA_ADMIN_TOKEN=")
		cmd.Stdin = strings.NewReader(stdin)
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
	if code, out, errOut := run(binarySpec, "apply", "-f", "-", "-m", "via the binary"); code != 0 || out != "generation 1 created (create) by dora: via the binary\n" {
		t.Fatalf("apply: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := run("", "flip"); code != 2 || !strings.Contains(errOut, "give exactly one SERVICE") {
		t.Errorf("flip without a service: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run("", "rollback", "9"); code != 1 || !strings.Contains(errOut, "404 Not Found") {
		t.Errorf("rollback 9: exit %d, stderr %q", code, errOut)
	}
	if code, out, _ := run("", "help"); code != 0 || !strings.Contains(out, "dwara weights SERVICE UPSTREAM=W...") {
		t.Errorf("help: exit %d, stdout %q", code, out)
	}
}
