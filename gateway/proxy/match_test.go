package proxy

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// TestMatchRules: on a sticky 100/0 split, a header rule sends exactly the
// requests that carry its header to the weight-0 target and a cookie rule
// those with its cookie, none misrouted either way; a matched new session
// still gets its cookie; each is counted by rule; a generation without the
// rules drops their series.
func TestMatchRules(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		beta, pro := "beta", "^pro"
		base := func() *spectest.Builder { return spectest.SplitOver([]*demo.Pool{a, b}, 100, 0).Sticky("sid", 0) }
		g.apply(t, 1, base().Edit(func(s *config.Spec) {
			s.Services[0].Split.Match = []config.MatchRule{
				{Name: "testers", Headers: map[string]config.StringMatch{"X-User-Group": {Exact: &beta}}, Target: "b"},
				{Name: "pro", Cookies: map[string]config.StringMatch{"plan": {Regex: &pro}}, Target: "b"},
			}
		}).YAML())

		const n = 1000
		for i := range n {
			for _, c := range []struct {
				kind    string
				headers map[string]string
				want    string
			}{
				{"header", map[string]string{"X-User-Group": "beta"}, "b"},
				{"other value", map[string]string{"X-User-Group": "betas"}, "a"},
				{"cookie", map[string]string{"Cookie": "sid=0123456789abcdef01234567; plan=pro-annual"}, "b"},
				{"other cookie", map[string]string{"Cookie": "sid=0123456789abcdef01234567; plan=free"}, "a"},
				{"none", nil, "a"},
			} {
				h := map[string]string{"X-Request-Id": fmt.Sprintf("m-%d", i)}
				for k, v := range c.headers {
					h[k] = v
				}
				resp, _ := get(t, client, g.URL+"/", h)
				if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Pool") != c.want {
					t.Fatalf("%s request %d: %d from %q, want 200 from %s", c.kind, i, resp.StatusCode, resp.Header.Get("X-Pool"), c.want)
				}
				_, hasCookie := c.headers["Cookie"]
				if minted := resp.Header.Get("Set-Cookie") != ""; minted == hasCookie {
					t.Fatalf("%s request %d: Set-Cookie %q; a new session (and only one) gets its cookie", c.kind, i, resp.Header.Get("Set-Cookie"))
				}
			}
		}
		for rule, want := range map[string]float64{"testers": n, "pro": n} {
			if got := testutil.ToFloat64(g.m.matches.WithLabelValues("web", rule, "b")); got != want {
				t.Errorf("dwara_split_matches_total{web,%s,b} = %v, want %v", rule, got, want)
			}
		}
		if got := testutil.ToFloat64(g.m.picks.WithLabelValues("web", "a")); got != 3*n {
			t.Errorf("dwara_split_picks_total{web,a} = %v, want %d (the requests no rule matched)", got, 3*n)
		}
		g.apply(t, 2, base().YAML())
		if got := testutil.CollectAndCount(g.m.matches); got != 0 {
			t.Errorf("%d dwara_split_matches_total series after the rules were removed, want 0", got)
		}
		resp, _ := get(t, client, g.URL+"/", map[string]string{"X-User-Group": "beta"})
		if resp.Header.Get("X-Pool") != "a" {
			t.Errorf("without the rules, a beta request went to %q", resp.Header.Get("X-Pool"))
		}
	})
}
