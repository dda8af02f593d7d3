package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ChangeReordered is the Change of a MatchChange whose rule kept its
// conditions and target but now comes before or after another rule it
// came after or before.
const ChangeReordered = "reordered"

// MatchChange is one change of a split's match rules. The requests a
// changed rule matches are routed by the rule, not by the weights ("matches
// decide"): which of them move, and so what share, depends on the traffic,
// which the weights cannot tell.
type MatchChange struct {
	// Rule is the rule's name.
	Rule string
	// Change is ChangeAdded, ChangeRemoved, ChangeModified (its conditions
	// or its target) or ChangeReordered.
	Change string
	// Details says what changed in words, e.g. "header X-User-Group = beta
	// -> api-canary" for an added or removed rule, "target
	// api-stable->api-canary", "position 2->1"; never empty.
	Details []string
}

// Conditions describes the rule's conditions, one a string, headers then
// cookies, each sorted by name: "header X-User-Group = beta" (exact),
// "header X-Env starts with pre" (prefix), "cookie plan ~ ^pro" (RE2
// regex). A value that is empty or holds spaces, quotes or characters that
// do not print is Go-quoted.
func (r MatchRule) Conditions() []string {
	out := make([]string, 0, len(r.Headers)+len(r.Cookies))
	for _, h := range slices.Sorted(maps.Keys(r.Headers)) {
		out = append(out, "header "+h+" "+r.Headers[h].String())
	}
	for _, c := range slices.Sorted(maps.Keys(r.Cookies)) {
		out = append(out, "cookie "+c+" "+r.Cookies[c].String())
	}
	return out
}

// String describes the rule: its conditions joined by " and ", an arrow
// and its target: "header X-User-Group = beta and cookie plan ~ ^pro ->
// api-canary".
func (r MatchRule) String() string {
	return strings.Join(r.Conditions(), " and ") + " -> " + r.Target
}

// String describes the condition as Conditions does, without the field:
// "= beta", "starts with pre", "~ ^pro"; "?" when not exactly one kind is
// set.
func (m StringMatch) String() string {
	kind, p := m.Pattern()
	op := map[string]string{"exact": "=", "prefix": "starts with", "regex": "~"}[kind]
	if op == "" {
		return "?"
	}
	return op + " " + displayValue(p)
}

// displayValue is a pattern as Conditions shows it: as it is, or
// Go-quoted when it would not read as one word.
func displayValue(s string) string {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '"' }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// rulesOf is a split's rules, none for a service without a split.
func rulesOf(svc *Service) []MatchRule {
	if svc.Split == nil {
		return nil
	}
	return svc.Split.Match
}

// diffMatch compares two versions of a split's match rules, by name: the
// new rules in order (added, modified or reordered), then the removed ones
// in the old order. A rule is reordered when the rules both versions have
// are in another order and its place among them changed; its position is
// the 1-based one in its whole list. Nil when nothing changed.
func diffMatch(o, n []MatchRule) []MatchChange {
	var out []MatchChange
	index := func(rs []MatchRule, name string) int {
		return slices.IndexFunc(rs, func(r MatchRule) bool { return r.Name == name })
	}
	// The names both versions have, in each version's order.
	var oc, nc []string
	for _, r := range o {
		if index(n, r.Name) >= 0 {
			oc = append(oc, r.Name)
		}
	}
	for _, r := range n {
		if index(o, r.Name) >= 0 {
			nc = append(nc, r.Name)
		}
	}
	for i, r := range n {
		j := index(o, r.Name)
		if j < 0 {
			out = append(out, MatchChange{Rule: r.Name, Change: ChangeAdded, Details: []string{r.String()}})
			continue
		}
		old := o[j]
		var details []string
		if was, is := old.Conditions(), r.Conditions(); !slices.Equal(was, is) {
			details = append(details, "conditions "+strings.Join(was, " and ")+" -> "+strings.Join(is, " and "))
		}
		if old.Target != r.Target {
			details = append(details, "target "+old.Target+"->"+r.Target)
		}
		change := ChangeModified
		if slices.Index(oc, r.Name) != slices.Index(nc, r.Name) {
			details = append(details, "position "+strconv.Itoa(j+1)+"->"+strconv.Itoa(i+1))
			if len(details) == 1 {
				change = ChangeReordered
			}
		}
		if len(details) > 0 {
			out = append(out, MatchChange{Rule: r.Name, Change: change, Details: details})
		}
	}
	for _, r := range o {
		if index(n, r.Name) < 0 {
			out = append(out, MatchChange{Rule: r.Name, Change: ChangeRemoved, Details: []string{r.String()}})
		}
	}
	return out
}

// matchDetail is the ServiceDiff detail of one rule change: "match rule
// beta added (header X-User-Group = beta -> api-canary)".
func matchDetail(c MatchChange) string {
	return "match rule " + c.Rule + " " + c.Change + " (" + strings.Join(c.Details, "; ") + ")"
}
