package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// matchRulesSpec is web on "/" split 90/10 between pools a and b with
// rules as its match list.
func matchRulesSpec(a, b *demo.Pool, rules ...config.MatchRule) []byte {
	return spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).Edit(func(s *config.Spec) {
		s.Services[0].Split.Match = rules
	}).JSON()
}

func strp(s string) *string { return &s }

// TestDashboardMatchRules drives the console in headless Chromium against
// a real dwara serve: web's card lists its match rules under the split, in
// order, with their conditions and targets; the flip's confirmation says
// the share it gives is of the traffic the weights decide, and that the
// rules decide the rest; a rule change published meanwhile shows up
// without a reload, and its diff in the history and the rollback's
// confirmation name each rule change as "matches decide".
func TestDashboardMatchRules(t *testing.T) {
	t.Parallel()
	browser, shots := dashboardBrowser(t)

	a, b := pools(t)
	beta := config.MatchRule{Name: "beta", Headers: map[string]config.StringMatch{"X-User-Group": {Exact: strp("beta")}}, Target: b.Name}
	pro := config.MatchRule{Name: "pro", Cookies: map[string]config.StringMatch{"plan": {Regex: strp("^pro")}},
		Headers: map[string]config.StringMatch{"X-Env": {Prefix: strp("eu-")}}, Target: a.Name}
	srv := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	g1 := publish(t, srv.Admin, matchRulesSpec(a, b, beta, pro))
	srv.waitApplied(t, g1.ID)
	origin := dashboardOrigin(t, srv.Admin)
	p, seen := openTab(t, browser, shots, origin)

	rules := `[...document.querySelectorAll('[data-service="web"] [data-match-rules] [data-match-rule]')]`
	rulesText := rules + `.map(li => li.textContent.replace(/\s+/g, ' ').trim()).join(' | ')`
	want := "beta: header X-User-Group = beta → pool-b | pro: header X-Env starts with eu- and cookie plan ~ ^pro → pool-a"
	p.waitFor("web's two match rules", rules+`.length === 2`)
	if got := eval[string](p, rulesText); got != want {
		t.Errorf("web's match rules read %q, want %q", got, want)
	}
	if got := eval[string](p, `document.querySelector('[data-service="web"] [data-match-rules] .split-label').textContent`); !strings.Contains(got, "checked in order before the weights") {
		t.Errorf("the rules' heading: %q", got)
	}
	p.screenshot("match-rules", false)

	// Flip: the share is of the traffic the weights decide, and the rules
	// keep theirs.
	p.click(`[data-service="web"] [data-action="flip"]`)
	p.waitFor("the flip's moved share (80%)", `document.querySelector('dialog[open] [data-moved-share="0.8"]')`)
	p.waitFor("the flip's note that the rules keep their requests", `document.querySelector('dialog[open] [data-matches-decide="kept"]')`)
	if got := eval[string](p, `document.querySelector('dialog[open] .moved').textContent`); !strings.Contains(got, "traffic the weights decide") {
		t.Errorf("the flip's confirmation says %q; want the share of the traffic the weights decide", got)
	}
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("generation 2 (flip) in the history", topGeneration+` === '2 flip'`)

	// Published through the API: beta now to pool-a, after pro.
	betaA := beta
	betaA.Target = a.Name
	g3 := publish(t, srv.Admin, matchRulesSpec(a, b, pro, betaA))
	p.waitFor("generation 3 in the history", topGeneration+fmt.Sprintf(` === '%d create'`, g3.ID))
	p.waitFor("the rules in their new order", rules+`.map(li => li.dataset.matchRule).join(',') === 'pro,beta'`)

	// Its diff in the history: each rule change, matches decide.
	p.click(fmt.Sprintf(`#history [data-generation="%d"] [data-action="diff"]`, g3.ID))
	change := func(rule, kind string) string {
		return fmt.Sprintf(`document.querySelector('#history [data-generation="%d"] [data-match-change=%q][data-change=%q]')`, g3.ID, rule, kind)
	}
	p.waitFor("beta modified in the diff", change("beta", "modified"))
	p.waitFor("pro reordered in the diff", change("pro", "reordered"))
	for rule, text := range map[string]string{
		"beta": "match rule beta modified target pool-b->pool-a; position 1->2 — matches decide",
		"pro":  "match rule pro reordered position 2->1 — matches decide",
	} {
		kind := map[string]string{"beta": "modified", "pro": "reordered"}[rule]
		if got := eval[string](p, change(rule, kind)+`.textContent.replace(/\s+/g, ' ').trim()`); got != text {
			t.Errorf("the diff's %s line reads %q, want %q", rule, got, text)
		}
	}
	p.waitFor("the diff's matches-decide note", fmt.Sprintf(`document.querySelector('#history [data-generation="%d"] [data-matches-decide="changed"]')`, g3.ID))
	// The rule changes are shown once, not again among the details.
	if n := eval[float64](p, fmt.Sprintf(`[...document.querySelectorAll('#history [data-generation="%d"] .details li')].filter(li => li.textContent.startsWith('match rule beta modified (')).length`, g3.ID)); n != 0 {
		t.Errorf("the rule change is listed %v more times among the details", n)
	}
	p.screenshot("match-diff", false)

	// Rolling back to generation 1 undoes both: its confirmation says so.
	// (The notice of generation 3 is dismissed first: it covers the
	// bottom of the page.)
	eval[any](p, `document.querySelectorAll('.notice .close').forEach(b => b.click())`)
	p.waitFor("the notices dismissed", `!document.querySelector('.notice')`)
	p.click(`#history [data-generation="1"] [data-action="rollback"]`)
	p.waitFor("the rollback's confirmation with beta's change", `document.querySelector('dialog[open] [data-diff-service="web"] [data-match-change="beta"][data-change="modified"]')`)
	p.waitFor("the rollback's matches-decide note", `document.querySelector('dialog[open] [data-diff-service="web"] [data-matches-decide="changed"]')`)
	p.click(`dialog[open] [data-confirm]`)
	p.waitFor("the rules back in their first order", rules+`.map(li => li.dataset.matchRule).join(',') === 'beta,pro'`)
	var cur apiv1.Generation
	call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/generations/current", nil, &cur)
	if cur.Action != apiv1.ActionRollback || cur.SourceID == nil || *cur.SourceID != g1.ID {
		t.Errorf("after the rollback the active generation is %d (%s from %v), want a rollback to %d", cur.ID, cur.Action, cur.SourceID, g1.ID)
	}

	seen.Check(t, strings.TrimPrefix(origin, "http://"), append(dashboardAssets, fmt.Sprintf("/api/v1/generations/%d/diff", g3.ID))...)
}
