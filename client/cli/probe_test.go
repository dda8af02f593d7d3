package cli

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
)

// TestProbe publishes a 100/0 split whose service declares an override
// header, serves the same spec through a real proxy, and probes it: every
// branch answers, the weight-0 one included, and the refusals name what
// is wrong.
func TestProbe(t *testing.T) {
	t.Parallel()
	a := startCLIAPI(t, "")
	upstream := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1" && !strings.HasPrefix(r.URL.Path, "/v1/") {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	stable, canary := upstream(http.StatusOK), upstream(http.StatusTeapot)
	b := spectest.New().Upstream("api-stable", stable).Upstream("api-canary", canary).
		Split("api", "/v1", spectest.T("api-stable", 100), spectest.T("api-canary", 0)).
		Edit(func(s *config.Spec) { s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"} }).
		Route("plain", "/plain", "api-stable")
	a.must(t, "apply", "-f", writeSpec(t, "spec.yaml", b.YAML()))
	px := proxy.New(proxy.Options{})
	t.Cleanup(px.Close)
	if err := px.Apply(b.Parsed(t), a.current(t).ID); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(httpfront.Handler(px))
	t.Cleanup(gw.Close)

	out := a.must(t, "probe", "api", "--proxy", gw.URL, "--count", "7")
	for _, want := range []string{"api-stable  7     200x7", "api-canary  7     418x7", "header X-Dwara-Branch"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
	out = a.must(t, "probe", "api", "--branch", "api-canary", "--proxy", gw.URL, "--count", "3")
	if strings.Contains(out, "api-stable") || !strings.Contains(out, "418x3") {
		t.Errorf("--branch api-canary:\n%s", out)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"probe", "api", "--branch", "nope", "--proxy", gw.URL}, 2, `"nope" is not a target of api; its targets: api-stable, api-canary`},
		{[]string{"probe", "api", "--count", "0"}, 2, "--count must be from 1 to 10000"},
		{[]string{"probe"}, 2, "probe needs exactly one SERVICE"},
		{[]string{"probe", "plain", "--proxy", gw.URL}, 1, "declares no override header"},
		{[]string{"probe", "missing", "--proxy", gw.URL}, 1, `has no service "missing"`},
	} {
		r := a.run(t, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("dwara %s: %s\nwant exit %d and %q", strings.Join(c.args, " "), r, c.code, c.want)
		}
	}
}
