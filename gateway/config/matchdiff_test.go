package config

import (
	"reflect"
	"testing"
)

func ptr(s string) *string { return &s }

func TestMatchRuleString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule MatchRule
		want string
	}{
		{"exact header", MatchRule{Headers: map[string]StringMatch{"X-User-Group": {Exact: ptr("beta")}}, Target: "api-canary"},
			"header X-User-Group = beta -> api-canary"},
		{"regex cookie", MatchRule{Cookies: map[string]StringMatch{"plan": {Regex: ptr("^pro")}}, Target: "b"},
			"cookie plan ~ ^pro -> b"},
		{"headers sorted, then cookies", MatchRule{
			Headers: map[string]StringMatch{"X-Env": {Prefix: ptr("pre")}, "Accept": {Exact: ptr("a b")}},
			Cookies: map[string]StringMatch{"z": {Exact: ptr("")}, "a": {Regex: ptr(`"q"`)}}, Target: "t"},
			`header Accept = "a b" and header X-Env starts with pre and cookie a ~ "\"q\"" and cookie z = "" -> t`},
		{"no kind", MatchRule{Headers: map[string]StringMatch{"X": {}}, Target: "t"}, "header X ? -> t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.rule.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDiffMatch(t *testing.T) {
	t.Parallel()
	api := func(s *Spec) *Split { svc, _ := s.Service("api"); return svc.Split }
	beta := MatchRule{Name: "beta", Headers: map[string]StringMatch{"X-User-Group": {Exact: ptr("beta")}}, Target: "api-canary"}
	pro := MatchRule{Name: "pro", Cookies: map[string]StringMatch{"plan": {Regex: ptr("^pro")}}, Target: "api-canary"}
	staff := MatchRule{Name: "staff", Headers: map[string]StringMatch{"X-Staff": {Exact: ptr("1")}}, Target: "api-stable"}
	withRules := func(rs ...MatchRule) func(*Spec) {
		return func(s *Spec) { api(s).Match = rs }
	}
	tests := []struct {
		name        string
		old, new    func(*Spec)
		wantChanges []MatchChange
		wantDetails []string
		wantDecide  bool
	}{
		{name: "none on either side", old: withRules(), new: withRules(),
			wantDetails: []string{}},
		{name: "unchanged rules", old: withRules(beta, pro), new: withRules(beta, pro),
			wantDetails: []string{}, wantDecide: true},
		{name: "added", old: withRules(), new: withRules(beta),
			wantChanges: []MatchChange{{Rule: "beta", Change: ChangeAdded, Details: []string{"header X-User-Group = beta -> api-canary"}}},
			wantDetails: []string{"match rule beta added (header X-User-Group = beta -> api-canary)"}, wantDecide: true},
		{name: "removed", old: withRules(beta, pro), new: withRules(pro),
			wantChanges: []MatchChange{{Rule: "beta", Change: ChangeRemoved, Details: []string{"header X-User-Group = beta -> api-canary"}}},
			wantDetails: []string{"match rule beta removed (header X-User-Group = beta -> api-canary)"}, wantDecide: true},
		{name: "target changed", old: withRules(beta), new: func(s *Spec) {
			b := beta
			b.Target = "api-stable"
			api(s).Match = []MatchRule{b}
		},
			wantChanges: []MatchChange{{Rule: "beta", Change: ChangeModified, Details: []string{"target api-canary->api-stable"}}},
			wantDetails: []string{"match rule beta modified (target api-canary->api-stable)"}, wantDecide: true},
		{name: "conditions changed", old: withRules(beta), new: func(s *Spec) {
			b := beta
			b.Headers = map[string]StringMatch{"X-User-Group": {Prefix: ptr("beta")}}
			b.Cookies = map[string]StringMatch{"plan": {Exact: ptr("pro")}}
			api(s).Match = []MatchRule{b}
		},
			wantChanges: []MatchChange{{Rule: "beta", Change: ChangeModified, Details: []string{
				"conditions header X-User-Group = beta -> header X-User-Group starts with beta and cookie plan = pro"}}},
			wantDetails: []string{"match rule beta modified (conditions header X-User-Group = beta -> header X-User-Group starts with beta and cookie plan = pro)"},
			wantDecide:  true},
		{name: "reordered", old: withRules(beta, pro, staff), new: withRules(pro, beta, staff),
			wantChanges: []MatchChange{
				{Rule: "pro", Change: ChangeReordered, Details: []string{"position 2->1"}},
				{Rule: "beta", Change: ChangeReordered, Details: []string{"position 1->2"}},
			},
			wantDetails: []string{"match rule pro reordered (position 2->1)", "match rule beta reordered (position 1->2)"}, wantDecide: true},
		{name: "a rule added in front reorders none", old: withRules(beta, pro), new: withRules(staff, beta, pro),
			wantChanges: []MatchChange{{Rule: "staff", Change: ChangeAdded, Details: []string{"header X-Staff = 1 -> api-stable"}}},
			wantDetails: []string{"match rule staff added (header X-Staff = 1 -> api-stable)"}, wantDecide: true},
		{name: "modified and moved", old: withRules(beta, pro), new: func(s *Spec) {
			b := beta
			b.Target = "api-stable"
			api(s).Match = []MatchRule{pro, b}
		},
			wantChanges: []MatchChange{
				{Rule: "pro", Change: ChangeReordered, Details: []string{"position 2->1"}},
				{Rule: "beta", Change: ChangeModified, Details: []string{"target api-canary->api-stable", "position 1->2"}},
			},
			wantDetails: []string{"match rule pro reordered (position 2->1)", "match rule beta modified (target api-canary->api-stable; position 1->2)"},
			wantDecide:  true},
		{name: "split to one upstream drops the rules", old: withRules(beta), new: func(s *Spec) {
			svc, _ := s.Service("api")
			svc.Split, svc.Upstream = nil, "api-stable"
		},
			wantChanges: []MatchChange{{Rule: "beta", Change: ChangeRemoved, Details: []string{"header X-User-Group = beta -> api-canary"}}},
			wantDetails: []string{"routing split api-stable 95 / api-canary 5, match rules beta -> upstream api-stable",
				"match rule beta removed (header X-User-Group = beta -> api-canary)"},
			wantDecide: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			old, new := validSpec(), validSpec()
			tt.old(old)
			tt.new(new)
			got := Diff(old, new).Services[0]
			if !reflect.DeepEqual(got.MatchChanges, tt.wantChanges) {
				t.Errorf("MatchChanges =\n  %+v\nwant\n  %+v", got.MatchChanges, tt.wantChanges)
			}
			if !reflect.DeepEqual(got.Details, tt.wantDetails) {
				t.Errorf("Details =\n  %q\nwant\n  %q", got.Details, tt.wantDetails)
			}
			if got.MatchesDecide != tt.wantDecide {
				t.Errorf("MatchesDecide = %t, want %t", got.MatchesDecide, tt.wantDecide)
			}
			wantChange := ChangeModified
			if len(tt.wantDetails) == 0 {
				wantChange = ChangeUnchanged
			}
			if got.Change != wantChange {
				t.Errorf("Change = %s, want %s", got.Change, wantChange)
			}
			// The weights did not change: the weighted share moves nothing,
			// except where the split itself went.
			if len(tt.wantChanges) > 0 && tt.wantChanges[0].Change != ChangeRemoved && got.MovedShare != 0 {
				t.Errorf("MovedShare = %v, want 0 (only the rules changed)", got.MovedShare)
			}
		})
	}
}

func TestDiffMatchAddedService(t *testing.T) {
	t.Parallel()
	old, new := validSpec(), validSpec()
	svc, _ := new.Service("api")
	svc.Split.Match = []MatchRule{{Name: "beta", Headers: map[string]StringMatch{"X-User-Group": {Exact: ptr("beta")}}, Target: "api-canary"}}
	old.Services = old.Services[1:]
	got := Diff(old, new).Services[0]
	if got.Change != ChangeAdded || got.MovedShare != 1 || got.MatchesDecide || len(got.MatchChanges) != 0 ||
		!reflect.DeepEqual(got.Details, []string{"split api-stable 95 / api-canary 5, match rules beta"}) {
		t.Errorf("added service with a rule = %+v", got)
	}
}
