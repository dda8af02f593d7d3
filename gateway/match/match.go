// Package match compiles a split's match rules (config.MatchRule) and
// checks a request against them: the first rule whose every condition the
// request meets names the target that serves it, without the weighted pick.
// Checking allocates nothing; a split without rules compiles to nil, which
// matches nothing at no cost.
package match

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/dwara/dwara/gateway/config"
)

// Request is what the rules read of a request. Header returns the first
// line of the field name (given in lower case), Cookie the first cookie
// called name; ok is false when there is none. Neither may allocate for
// the check to allocate nothing.
type Request interface {
	Header(lowerName string) (value string, ok bool)
	Cookie(name string) (value string, ok bool)
}

// Rules are a split's compiled match rules, in order.
type Rules struct {
	rules []rule
}

type rule struct {
	name   string
	target int // the index of its target in the split
	conds  []cond
}

// The kinds of a condition.
const (
	exact = iota
	prefix
	regex
)

type cond struct {
	cookie  bool
	name    string // a header's in lower case
	kind    int
	pattern string
	re      *regexp.Regexp
}

// Compile compiles sp's rules (validated by config); nil when sp has none.
func Compile(sp *config.Split) (*Rules, error) {
	if sp == nil || len(sp.Match) == 0 {
		return nil, nil
	}
	rs := &Rules{rules: make([]rule, len(sp.Match))}
	for i, mr := range sp.Match {
		r := rule{name: mr.Name, target: slices.IndexFunc(sp.Targets, func(t config.Target) bool { return t.Upstream == mr.Target })}
		if r.target < 0 {
			return nil, fmt.Errorf("match rule %q: target %q is not a target of the split", mr.Name, mr.Target)
		}
		add := func(cookie bool, name string, m config.StringMatch) error {
			kind, pattern := m.Pattern()
			c := cond{cookie: cookie, name: name, pattern: pattern}
			if !cookie {
				c.name = strings.ToLower(name)
			}
			switch kind {
			case "exact":
				c.kind = exact
			case "prefix":
				c.kind = prefix
			case "regex":
				re, err := regexp.Compile(pattern)
				if err != nil {
					return fmt.Errorf("match rule %q: %w", mr.Name, err)
				}
				c.kind, c.re = regex, re
			default:
				return fmt.Errorf("match rule %q: condition on %q has no single kind", mr.Name, name)
			}
			r.conds = append(r.conds, c)
			return nil
		}
		// In a fixed order, so a rule's conditions are checked the same
		// way every time: headers, then cookies, by name.
		for _, h := range slices.Sorted(maps.Keys(mr.Headers)) {
			if err := add(false, h, mr.Headers[h]); err != nil {
				return nil, err
			}
		}
		for _, c := range slices.Sorted(maps.Keys(mr.Cookies)) {
			if err := add(true, c, mr.Cookies[c]); err != nil {
				return nil, err
			}
		}
		rs.rules[i] = r
	}
	return rs, nil
}

// Len is the number of rules (0 for nil).
func (rs *Rules) Len() int {
	if rs == nil {
		return 0
	}
	return len(rs.rules)
}

// Rule returns rule i's name and the index of its target in the split.
func (rs *Rules) Rule(i int) (name string, target int) {
	return rs.rules[i].name, rs.rules[i].target
}

// Match returns the index of the first rule req meets, or -1 (always for
// nil Rules).
func (rs *Rules) Match(req Request) int {
	if rs == nil {
		return -1
	}
	for i := range rs.rules {
		if rs.rules[i].meets(req) {
			return i
		}
	}
	return -1
}

func (r *rule) meets(req Request) bool {
	for i := range r.conds {
		c := &r.conds[i]
		var v string
		var ok bool
		if c.cookie {
			v, ok = req.Cookie(c.name)
		} else {
			v, ok = req.Header(c.name)
		}
		if !ok {
			return false
		}
		switch c.kind {
		case exact:
			ok = v == c.pattern
		case prefix:
			ok = strings.HasPrefix(v, c.pattern)
		default:
			ok = c.re.MatchString(v)
		}
		if !ok {
			return false
		}
	}
	return true
}
