package db

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits of what one audit entry stores (see SanitizeText and
// sanitizeDetail): an entry is evidence, and a refused call must always be
// writable, whatever its caller sent, and never large.
const (
	// maxAuditText caps each text column of an audit entry, in characters.
	maxAuditText = 256
	// maxDetailString caps each string inside an audit detail, keys
	// included, in characters.
	maxDetailString = 2048
	// maxDetailItems caps the members of each object and the items of
	// each array inside an audit detail.
	maxDetailItems = 100
	// maxDetailDepth caps the nesting of an audit detail.
	maxDetailDepth = 8
	// maxDetailBytes caps the encoded audit detail as a whole.
	maxDetailBytes = 64 << 10
)

// Replacements of what PostgreSQL text and jsonb cannot store.
const (
	// nulReplacement stands for a NUL character: U+2400 SYMBOL FOR NULL.
	nulReplacement = "\u2400"
	// invalidReplacement stands for each run of bytes that is not UTF-8.
	invalidReplacement = "\uFFFD"
	// truncation ends a string that was cut.
	truncation = "…"
)

// SanitizeText returns s as text PostgreSQL can store, at most limit
// characters long (limit <= 0: no cap): every NUL becomes U+2400 (␀),
// every run of bytes that is not UTF-8 becomes U+FFFD, and a longer
// string is cut and ends with "…". A string that is already fine is
// returned as it is.
func SanitizeText(s string, limit int) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", nulReplacement)
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, invalidReplacement)
	}
	if limit > 0 && utf8.RuneCountInString(s) > limit {
		n := 0
		for i := range s {
			if n == limit-1 {
				return s[:i] + truncation
			}
			n++
		}
	}
	return s
}

// sanitizeDetail returns an audit detail that PostgreSQL's jsonb accepts
// and that stays small: nil for an empty detail; a JSON object in which
// every string and key went through SanitizeText (maxDetailString), each
// object and array keeps its first maxDetailItems members (the others are
// counted under "…" in an object, and by a last string item in an array),
// nesting stops at maxDetailDepth (deeper values become "…"), and a
// detail still over maxDetailBytes is replaced by {"truncated": <its
// size>}. A detail that is not a JSON object is stored as {"value": ...}.
func sanitizeDetail(detail json.RawMessage) []byte {
	if len(bytes.TrimSpace(detail)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(detail))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		v = map[string]any{"unreadable": SanitizeText(string(detail), maxDetailString)}
	}
	if v == nil {
		return nil
	}
	v = sanitizeValue(v, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{"value": v}
	}
	out, err := json.Marshal(v)
	if err != nil || len(out) > maxDetailBytes {
		out, _ = json.Marshal(map[string]any{"truncated": len(detail)})
	}
	return out
}

// sanitizeValue is sanitizeDetail for one decoded value at depth.
func sanitizeValue(v any, depth int) any {
	switch t := v.(type) {
	case string:
		return SanitizeText(t, maxDetailString)
	case map[string]any:
		if depth >= maxDetailDepth {
			return truncation
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out := make(map[string]any, min(len(keys), maxDetailItems+1))
		for i, k := range keys {
			if i == maxDetailItems {
				out[truncation] = len(keys) - maxDetailItems
				break
			}
			// Two keys may sanitise to one; the first (in sorted order) stays.
			sk := SanitizeText(k, maxDetailString)
			if _, dup := out[sk]; !dup {
				out[sk] = sanitizeValue(t[k], depth+1)
			}
		}
		return out
	case []any:
		if depth >= maxDetailDepth {
			return truncation
		}
		n := min(len(t), maxDetailItems)
		out := make([]any, 0, n+1)
		for _, item := range t[:n] {
			out = append(out, sanitizeValue(item, depth+1))
		}
		if len(t) > n {
			out = append(out, truncation+" "+strconv.Itoa(len(t)-n)+" more")
		}
		return out
	}
	return v // json.Number, bool
}
