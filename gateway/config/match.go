package config

import (
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Limits of match rules.
const (
	// MaxMatchRules is the most rules a split may have.
	MaxMatchRules = 32
	// MaxMatchConditions is the most conditions (headers and cookies) of
	// one rule.
	MaxMatchConditions = 8
	// MaxMatchPattern is the longest exact value, prefix or regex, in
	// bytes.
	MaxMatchPattern = 1024
)

// MatchRule is one rule of a split's match list: a request whose headers
// and cookies meet every condition is served by Target, without the
// weighted pick; rules are checked in order and the first that matches
// wins. A request no rule matches is picked by weight as usual.
type MatchRule struct {
	// Name names the rule in metrics and events, unique in its split.
	Name string `json:"name"`
	// Headers are conditions on request header fields, by field name
	// (case-insensitive); a field sent more than once is judged by its
	// first line.
	Headers map[string]StringMatch `json:"headers,omitempty"`
	// Cookies are conditions on request cookies, by cookie name
	// (case-sensitive); a cookie sent more than once is judged by the
	// first.
	Cookies map[string]StringMatch `json:"cookies,omitempty"`
	// Target is the upstream of one of the split's targets.
	Target string `json:"target"`
}

// StringMatch is one condition on a value: exactly one of Exact (the whole
// value), Prefix, or Regex (RE2, unanchored: write ^...$ for the whole
// value). A request without the field or cookie meets none.
type StringMatch struct {
	Exact  *string `json:"exact,omitempty"`
	Prefix *string `json:"prefix,omitempty"`
	Regex  *string `json:"regex,omitempty"`
}

// Pattern returns the condition's kind ("exact", "prefix" or "regex") and
// pattern; kind is "" when not exactly one is set.
func (m StringMatch) Pattern() (kind, pattern string) {
	n := 0
	for _, c := range []struct {
		k string
		p *string
	}{{"exact", m.Exact}, {"prefix", m.Prefix}, {"regex", m.Regex}} {
		if c.p != nil {
			kind, pattern = c.k, *c.p
			n++
		}
	}
	if n != 1 {
		return "", ""
	}
	return kind, pattern
}

// match checks a split's match rules (at path): names, targets, and each
// condition.
func (v *validator) match(sp *Split, path string) {
	if len(sp.Match) > MaxMatchRules {
		v.probs.add(path, "at most %d rules, got %d", MaxMatchRules, len(sp.Match))
		return
	}
	seen := map[string]int{}
	for i, r := range sp.Match {
		rp := index(path, i)
		v.name(r.Name, rp, i, "rule", path, seen)
		tp := member(rp, "target")
		switch {
		case r.Target == "":
			v.probs.add(tp, "is required: the upstream of one of the split's targets")
		case !slices.ContainsFunc(sp.Targets, func(t Target) bool { return t.Upstream == r.Target }):
			names := make([]string, len(sp.Targets))
			for j, t := range sp.Targets {
				names[j] = t.Upstream
			}
			msg := "unknown target " + quote(r.Target) + "; the split's targets are " + targetNames(sp.Targets)
			if near := Nearest(r.Target, names); near != "" {
				msg += "; did you mean " + quote(near) + "?"
			}
			v.probs.add(tp, "%s", msg)
		}
		n := len(r.Headers) + len(r.Cookies)
		switch {
		case n == 0:
			v.probs.add(rp, "needs at least one condition (headers or cookies); a rule that matches every request would make the split's weights moot")
		case n > MaxMatchConditions:
			v.probs.add(rp, "at most %d conditions, got %d", MaxMatchConditions, n)
		}
		lower := map[string]string{}
		for _, h := range slices.Sorted(maps.Keys(r.Headers)) {
			hp := member(member(rp, "headers"), h)
			if !isToken(h) || len(h) > 64 {
				v.probs.add(hp, "must be an HTTP field name (a token of at most 64 characters)")
			}
			if other, dup := lower[strings.ToLower(h)]; dup {
				v.probs.add(hp, "names the same field as %s (field names are case-insensitive)", quote(other))
			}
			lower[strings.ToLower(h)] = h
			v.stringMatch(r.Headers[h], hp)
		}
		for _, c := range slices.Sorted(maps.Keys(r.Cookies)) {
			cp := member(member(rp, "cookies"), c)
			if !isToken(c) {
				v.probs.add(cp, "must be a cookie name (an RFC 6265 token)")
			}
			v.stringMatch(r.Cookies[c], cp)
		}
	}
}

// stringMatch checks one condition.
func (v *validator) stringMatch(m StringMatch, path string) {
	kind, pattern := m.Pattern()
	if kind == "" {
		v.probs.add(path, "give exactly one of exact, prefix and regex")
		return
	}
	p := member(path, kind)
	if len(pattern) > MaxMatchPattern {
		v.probs.add(p, "at most %d bytes, got %d", MaxMatchPattern, len(pattern))
		return
	}
	if kind != "regex" && strings.IndexFunc(pattern, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) >= 0 {
		v.probs.add(p, "must not hold control characters: no field value or cookie does")
		return
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		v.probs.add(p, "must not hold a NUL character (write \\x00 in the pattern)")
		return
	}
	switch kind {
	case "regex":
		if _, err := regexp.Compile(pattern); err != nil {
			v.probs.add(p, "is not an RE2 regular expression: %v", err)
		}
	case "prefix":
		if pattern == "" {
			v.probs.add(p, "must not be empty: an empty prefix matches any value (use regex: \"\" for a field that is only present)")
		}
	}
}
