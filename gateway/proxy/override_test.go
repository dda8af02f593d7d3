package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// TestForcedBranch: on a sticky 100/0 split with an override header, every
// request naming the weight-0 target is served by it with no cookie
// minted, and counted; an unknown name is 400 naming the allowed ones; a
// service without override ignores the header.
func TestForcedBranch(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 100, 0).Sticky("sid", 0).
			Edit(func(s *config.Spec) { s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"} }).
			Split("plain", "/plain", spectest.T("a", 1), spectest.T("b", 0)).YAML())

		for i := range 100 {
			resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "b", "X-Request-Id": fmt.Sprintf("f-%d", i)})
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != "b" {
				t.Fatalf("forced request %d: %d from %q, want 200 from b", i, resp.StatusCode, resp.Header.Get("X-Pool"))
			}
			if sc := resp.Header.Get("Set-Cookie"); sc != "" {
				t.Fatalf("forced request %d minted a cookie: %s", i, sc)
			}
		}
		if n := testutil.ToFloat64(g.m.forced.WithLabelValues("web", "b")); n != 100 {
			t.Errorf("dwara_split_forced_total{web,b} = %v, want 100", n)
		}
		// An existing session is not changed either.
		resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "a", "Cookie": "sid=0123456789abcdef01234567"})
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != "a" || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("forced a with a session: %d from %q, Set-Cookie %q", resp.StatusCode, resp.Header.Get("X-Pool"), resp.Header.Get("Set-Cookie"))
		}

		resp, body := get(t, client, g.URL+"/", map[string]string{"X-Dwara-Branch": "c"})
		var p struct{ Detail string }
		_ = json.Unmarshal([]byte(body), &p)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(p.Detail, "allowed: a, b") {
			t.Errorf("unknown branch: %d %q, want 400 naming a, b", resp.StatusCode, p.Detail)
		}
		// Without override the header is only a header the gateway removes.
		for range 20 {
			resp, _ := get(t, client, g.URL+"/plain", map[string]string{"X-Dwara-Branch": "b"})
			if resp.Header.Get("X-Pool") != "a" {
				t.Fatalf("a service without override followed the header to %q", resp.Header.Get("X-Pool"))
			}
		}
	})
}

// TestOverrideValidation refuses override headers that are not tokens or
// that the gateway or the connection needs.
func TestOverrideValidation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ header, want string }{
		{"", "is required"},
		{"Bad Header", "must be an HTTP field name"},
		{"Cookie", "a field the gateway sets or the connection needs"},
		{"x-request-id", "a field the gateway sets or the connection needs"},
	} {
		b := spectest.Canary(90, 10).Edit(func(s *config.Spec) { s.Services[0].Override = &config.Override{Header: c.header} })
		_, err := config.Parse(b.JSON())
		if err == nil || !strings.Contains(err.Error(), "services[0].override.header: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("header %q: %v, want %q", c.header, err, c.want)
		}
	}
	if _, err := config.Parse(spectest.Canary(90, 10).Edit(func(s *config.Spec) {
		s.Services[0].Override = &config.Override{Header: "X-Dwara-Branch"}
	}).JSON()); err != nil {
		t.Errorf("X-Dwara-Branch refused: %v", err)
	}
}
