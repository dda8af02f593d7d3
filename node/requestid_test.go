package node

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// mintedID is the one form of a request id the API and the proxy mint.
var mintedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// answerID sends a GET to url and returns the answer's status and
// X-Request-Id, and the X-Request-Id the upstream received when the answer
// is a demo pool's echo.
func answerID(t *testing.T, url string) (status int, id, upstreamSaw string) {
	t.Helper()
	// A connection of its own, closed after the answer: a gateway that
	// stopped leaves none behind for the leak check to wait on.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: wait}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var echo demo.Echo
	if json.Unmarshal(body, &echo) == nil {
		upstreamSaw = echo.Header.Get("X-Request-Id")
	}
	return resp.StatusCode, resp.Header.Get("X-Request-Id"), upstreamSaw
}

// TestRequestIDForms checks that `serve`'s API and proxy, and a gateway on
// each front, mint request ids of one form, 32 lowercase hex digits, and
// that a proxied answer carries the id the upstream received.
func TestRequestIDForms(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	spec := spectest.SplitOver([]*demo.Pool{a, b}, 50, 50)

	s := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	publish(t, s.Admin, spec.JSON())
	s.waitApplied(t, 1)
	for _, path := range []string{"/healthz", "/api/v1/generations", "/api/v1/generations/9"} {
		if _, id, _ := answerID(t, "http://"+s.Admin+path); !mintedID.MatchString(id) {
			t.Errorf("API %s: X-Request-Id %q, want 32 lowercase hex digits", path, id)
		}
	}
	file := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(file, []byte(spec.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	proxies := map[string]string{"serve": s.Proxy}
	for _, front := range []string{FrontNetHTTP, FrontFastHTTP} {
		g := startGateway(t, GatewayConfig{ConfigFile: file, Front: front})
		g.waitApplied(t, 1)
		proxies["gateway --front "+front] = g.Proxy
	}
	for name, addr := range proxies {
		status, id, saw := answerID(t, "http://"+addr+"/?echo=1")
		if status != http.StatusOK || !mintedID.MatchString(id) || saw != id {
			t.Errorf("%s: status %d, X-Request-Id %q, the upstream saw %q; want 200 and one id of 32 lowercase hex digits",
				name, status, id, saw)
		}
	}
}

// TestProxyRefusalRequestIDs checks that the proxy's own refusals carry a
// request id, on both fronts.
func TestProxyRefusalRequestIDs(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	spec := spectest.SplitOver([]*demo.Pool{a, b}, 50, 50)
	s := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	if status, id, _ := answerID(t, "http://"+s.Proxy+"/"); status != http.StatusServiceUnavailable || !mintedID.MatchString(id) {
		t.Errorf("serve before a generation: status %d, X-Request-Id %q", status, id)
	}
	file := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(file, []byte(spec.YAML()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, front := range []string{FrontNetHTTP, FrontFastHTTP} {
		g := startGateway(t, GatewayConfig{ConfigFile: file, Front: front})
		g.waitApplied(t, 1)
		for _, c := range []struct {
			method, path string
			status       int
		}{{"TRACE", "/", http.StatusMethodNotAllowed}, {"GET", "/a/%2e%2e/b", http.StatusBadRequest}} {
			req, _ := http.NewRequest(c.method, "http://"+g.Proxy+c.path, nil)
			resp, err := httpc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if id := resp.Header.Get("X-Request-Id"); resp.StatusCode != c.status || !mintedID.MatchString(id) {
				t.Errorf("%s: %s %s: status %d, X-Request-Id %q; want %d with an id", front, c.method, c.path, resp.StatusCode, id, c.status)
			}
		}
	}
}
