// Package modelreq reads and rewrites the routing fields of an
// OpenAI-compatible request body (chat completions, completions,
// embeddings, responses) without decoding it: Scan finds the top-level
// "model", "user" and "stream" in one pass over the bytes, and Rewrite
// replaces the model's value, every other byte of the body kept as sent
// (no re-ordering of fields, no re-encoding of numbers or strings).
//
// A body that is not a JSON object, or that names "model" (or "user") twice
// at the top level, is refused: a provider that reads the last of two
// "model" fields would otherwise be sent what the pick did not choose.
package modelreq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// Errors of Scan.
var (
	// ErrNotObject: the body is not one JSON object (syntax error, another
	// JSON value, or trailing data).
	ErrNotObject = errors.New("the body is not a JSON object")
	// ErrDuplicate: a routing field is named twice at the top level.
	ErrDuplicate = errors.New("a routing field is named twice")
	// ErrNotString: "model" or "user" is not a string.
	ErrNotString = errors.New("a routing field is not a string")
)

// Fields are the routing fields of a body, as Scan found them.
type Fields struct {
	// Model is the top-level "model" (unescaped), "" when absent;
	// HasModel says whether it was there.
	Model    string
	HasModel bool
	// ModelStart and ModelEnd are the offsets of the model's JSON string
	// in the body, quotes included: Rewrite replaces body[ModelStart:ModelEnd].
	ModelStart, ModelEnd int
	// User is the top-level "user" (unescaped), "" when absent.
	User string
	// Stream is true when the top-level "stream" is the literal true.
	Stream bool
}

// Scan validates that body is one JSON object and returns its top-level
// routing fields. It allocates only to unescape a field that holds escapes
// (or to copy the model and user out of the body).
func Scan(body []byte) (Fields, error) { return scan(body, false) }

// ScanView is Scan whose Model and User, when they hold no escapes, are
// views of body's bytes rather than copies: it allocates nothing for a
// body without escapes in those fields, and the strings are valid only
// while body is unchanged (the proxy's pick reads them before it reuses
// the buffer).
func ScanView(body []byte) (Fields, error) { return scan(body, true) }

func scan(body []byte, view bool) (Fields, error) {
	var f Fields
	if !json.Valid(body) {
		return f, ErrNotObject
	}
	s := scanner{b: body}
	s.space()
	if !s.eat('{') {
		return f, ErrNotObject
	}
	seenUser, seenStream := false, false
	s.space()
	if s.eat('}') {
		return f, nil
	}
	for {
		s.space()
		ks, ke := s.str()
		s.space()
		s.eat(':')
		s.space()
		vs := s.i
		kind := s.value()
		ve := s.i
		switch key := s.b[ks:ke]; {
		case keyIs(key, "model"):
			if f.HasModel {
				return f, fmt.Errorf("%w: \"model\"", ErrDuplicate)
			}
			if kind != '"' {
				return f, fmt.Errorf("%w: \"model\"", ErrNotString)
			}
			f.HasModel, f.ModelStart, f.ModelEnd = true, vs, ve
			f.Model = unquote(s.b[vs:ve], view)
		case keyIs(key, "user"):
			if seenUser {
				return f, fmt.Errorf("%w: \"user\"", ErrDuplicate)
			}
			seenUser = true
			if kind != '"' {
				return f, fmt.Errorf("%w: \"user\"", ErrNotString)
			}
			f.User = unquote(s.b[vs:ve], view)
		case keyIs(key, "stream"):
			if seenStream {
				return f, fmt.Errorf("%w: \"stream\"", ErrDuplicate)
			}
			seenStream = true
			f.Stream = bytes.Equal(s.b[vs:ve], []byte("true"))
		}
		s.space()
		if s.eat('}') {
			return f, nil
		}
		s.eat(',')
	}
}

// Rewrite appends to dst the body with its model replaced by model (f from
// Scan of that body, with HasModel), and returns the result.
func Rewrite(dst, body []byte, f Fields, model string) []byte {
	dst = append(dst, body[:f.ModelStart]...)
	dst = appendString(dst, model)
	return append(dst, body[f.ModelEnd:]...)
}

// scanner walks a body json.Valid accepted, so it checks nothing itself.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str skips a string and returns its offsets, quotes included.
func (s *scanner) str() (start, end int) {
	start = s.i
	s.i++ // the opening quote
	for {
		// The next quote (IndexByte is vectorised), unless an odd run of
		// backslashes escapes it.
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			s.i = len(s.b)
			return start, s.i
		}
		q := s.i + j
		k := q
		for k > s.i && s.b[k-1] == '\\' {
			k--
		}
		s.i = q + 1
		if (q-k)%2 == 0 {
			return start, s.i
		}
	}
}

// value skips one value and returns its first byte ('"', '{', '[', 't',
// 'f', 'n', or a number's).
func (s *scanner) value() byte {
	c := s.b[s.i]
	switch c {
	case '"':
		s.str()
	case '{', '[':
		// Nested values are skipped by depth: strings are the only place
		// a bracket may hide.
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return c
				}
			}
			s.i++
		}
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return c
			}
			s.i++
		}
	}
	return c
}

// keyIs reports whether the JSON string key (quotes included) is name.
func keyIs(key []byte, name string) bool {
	if len(key) == len(name)+2 && string(key[1:len(key)-1]) == name {
		return true
	}
	return bytes.IndexByte(key, '\\') >= 0 && unquote(key, false) == name
}

// unquote returns the value of a JSON string (quotes included), as a
// decoder reads it (escapes resolved, invalid UTF-8 as U+FFFD); with
// view, a string without escapes is a view of q's bytes.
func unquote(q []byte, view bool) string {
	if bytes.IndexByte(q, '\\') < 0 && utf8.Valid(q) {
		if view {
			if len(q) == 2 {
				return ""
			}
			return unsafe.String(&q[1], len(q)-2)
		}
		return string(q[1 : len(q)-1])
	}
	var s string
	_ = json.Unmarshal(q, &s) // json.Valid accepted the body
	return s
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			dst = append(dst, c)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				dst = append(dst, `\ufffd`...)
			} else {
				dst = append(dst, s[i:i+n]...)
			}
			i += n
			continue
		}
		i++
	}
	return append(dst, '"')
}
