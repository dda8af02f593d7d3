package api

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

func strp(s string) *string { return &s }

// Match rules of the api service in TestDiffMatchRules.
var (
	ruleBeta  = config.MatchRule{Name: "beta", Headers: map[string]config.StringMatch{"X-User-Group": {Exact: strp("beta")}}, Target: "api-canary"}
	rulePro   = config.MatchRule{Name: "pro", Cookies: map[string]config.StringMatch{"plan": {Regex: strp("^pro")}}, Target: "api-canary"}
	ruleStaff = config.MatchRule{Name: "staff", Headers: map[string]config.StringMatch{"X-Staff": {Prefix: strp("yes")}}, Target: "api-stable"}
)

// specRules is specWith(stable, canary) with rules as the api service's
// match list.
func specRules(stable, canary int, rules ...config.MatchRule) *spectest.Builder {
	return specWith(stable, canary).Edit(func(s *config.Spec) {
		svc, _ := s.Service("api")
		svc.Split.Match = rules
	})
}

// TestDiffMatchRules publishes one change of the api service's match rules
// after another and checks what GET .../diff and a dry run say of each: the
// rule and its kind of change, the details, that matches decide, and that
// moved_share counts only what the weights decide.
func TestDiffMatchRules(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.publish(specRules(95, 5, ruleBeta, rulePro), "")

	betaStable := ruleBeta
	betaStable.Target = "api-stable"
	proExact := rulePro
	proExact.Cookies = map[string]config.StringMatch{"plan": {Exact: strp("pro")}}
	steps := []struct {
		name        string
		spec        *spectest.Builder // nil: the weights call below
		wantShare   float64
		wantChanges []apiv1.MatchChange
	}{
		{name: "weights change, rules kept", wantShare: 0.05, wantChanges: []apiv1.MatchChange{}},
		{name: "rule added", spec: specRules(90, 10, ruleBeta, rulePro, ruleStaff),
			wantChanges: []apiv1.MatchChange{{Rule: "staff", Change: apiv1.ChangeAdded, Details: []string{"header X-Staff starts with yes -> api-stable"}}}},
		{name: "target changed", spec: specRules(90, 10, betaStable, rulePro, ruleStaff),
			wantChanges: []apiv1.MatchChange{{Rule: "beta", Change: apiv1.ChangeModified, Details: []string{"target api-canary->api-stable"}}}},
		{name: "conditions changed", spec: specRules(90, 10, betaStable, proExact, ruleStaff),
			wantChanges: []apiv1.MatchChange{{Rule: "pro", Change: apiv1.ChangeModified, Details: []string{"conditions cookie plan ~ ^pro -> cookie plan = pro"}}}},
		{name: "reordered", spec: specRules(90, 10, ruleStaff, betaStable, proExact),
			wantChanges: []apiv1.MatchChange{
				{Rule: "staff", Change: apiv1.ChangeReordered, Details: []string{"position 3->1"}},
				{Rule: "beta", Change: apiv1.ChangeReordered, Details: []string{"position 1->2"}},
				{Rule: "pro", Change: apiv1.ChangeReordered, Details: []string{"position 2->3"}},
			}},
		{name: "rule removed", spec: specRules(90, 10, betaStable, proExact),
			wantChanges: []apiv1.MatchChange{{Rule: "staff", Change: apiv1.ChangeRemoved, Details: []string{"header X-Staff starts with yes -> api-stable"}}}},
	}
	check := func(t *testing.T, what string, d apiv1.Diff, wantShare float64, want []apiv1.MatchChange) {
		t.Helper()
		api := findService(t, d, "api")
		if !api.MatchesDecide || !near(api.MovedShare, wantShare) || api.Change != apiv1.ChangeModified {
			t.Errorf("%s: api = %+v; want modified, matches_decide, moved_share %v", what, api, wantShare)
		}
		if !slices.EqualFunc(api.MatchChanges, want, func(a, b apiv1.MatchChange) bool {
			return a.Rule == b.Rule && a.Change == b.Change && slices.Equal(a.Details, b.Details)
		}) {
			t.Errorf("%s: match_changes = %+v, want %+v", what, api.MatchChanges, want)
		}
		// Each rule change is also a detail in words.
		for _, c := range want {
			detail := fmt.Sprintf("match rule %s %s (%s)", c.Rule, c.Change, strings.Join(c.Details, "; "))
			if !slices.Contains(api.Details, detail) {
				t.Errorf("%s: details %q lack %q", what, api.Details, detail)
			}
		}
		// A service without rules: matches do not decide, and the list is
		// there, empty.
		if web := findService(t, d, "web"); web.MatchesDecide || web.MatchChanges == nil || len(web.MatchChanges) != 0 {
			t.Errorf("%s: web = %+v", what, web)
		}
	}
	for i, st := range steps {
		// The dry run of the step says what the diff of its generation says.
		if st.spec != nil {
			var dr apiv1.DryRunResult
			e.do(call{method: "POST", path: "/api/v1/generations?dry_run=true", body: map[string]any{"spec": st.spec}}).
				want(t, http.StatusOK).decode(t, &dr)
			check(t, st.name+" (dry run)", dr.Impact, st.wantShare, st.wantChanges)
			e.publish(st.spec, st.name)
		} else {
			e.do(call{method: "PUT", path: "/api/v1/services/api/weights",
				body: map[string]any{"weights": map[string]int{"api-stable": 90, "api-canary": 10}}}).want(t, http.StatusCreated)
		}
		var d apiv1.Diff
		e.do(call{method: "GET", path: fmt.Sprintf("/api/v1/generations/%d/diff", i+2)}).want(t, http.StatusOK).decode(t, &d)
		check(t, st.name, d, st.wantShare, st.wantChanges)
	}

	// Generation 1 against the last: every change at once, beside the
	// weights.
	var d apiv1.Diff
	e.do(call{method: "GET", path: fmt.Sprintf("/api/v1/generations/%d/diff?against=1", len(steps)+1)}).want(t, http.StatusOK).decode(t, &d)
	check(t, "1 -> last", d, 0.05, []apiv1.MatchChange{
		{Rule: "beta", Change: apiv1.ChangeModified, Details: []string{"target api-canary->api-stable"}},
		{Rule: "pro", Change: apiv1.ChangeModified, Details: []string{"conditions cookie plan ~ ^pro -> cookie plan = pro"}},
	})
	// The first generation against nothing: added, every request moves,
	// and the rules are named in its routing.
	e.do(call{method: "GET", path: "/api/v1/generations/1/diff"}).want(t, http.StatusOK).decode(t, &d)
	if api := findService(t, d, "api"); api.Change != apiv1.ChangeAdded || api.MovedShare != 1 || api.MatchesDecide ||
		len(api.MatchChanges) != 0 || !slices.Equal(api.Details, []string{"split api-stable 95 / api-canary 5, match rules beta, pro"}) {
		t.Errorf("api added = %+v", api)
	}
}
