package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dwara/dwara/api/apiv1"
)

// PostgreSQL stores text as UTF-8 and refuses the NUL character, in text
// columns and in jsonb alike, so a message, a name or a key that holds one
// cannot be stored; encoding/json turns invalid UTF-8 (raw, or an unpaired
// UTF-16 surrogate escape) into U+FFFD without a word, so the text stored
// would not be the text sent. The API refuses both with 422 and the path
// of the field.

// Messages of a text field the API refuses.
const (
	msgNUL     = "must not contain NUL characters (U+0000)"
	msgInvalid = "must be valid UTF-8 text (found bytes that are not UTF-8)"
	msgLone    = "must be valid UTF-8 text (found an unpaired UTF-16 surrogate escape)"
)

// textFault returns why s cannot be stored as text, "" when it can.
func textFault(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return msgNUL
	case !utf8.ValidString(s):
		return msgInvalid
	}
	return ""
}

// textProblem is the 422 Problem listing errs.
func textProblem(errs []apiv1.FieldError) *apiv1.Problem {
	p := problemf(http.StatusUnprocessableEntity, "the request holds text that cannot be stored")
	p.Errors = errs
	return p
}

// textErrors walks the JSON document body and returns one error for each
// string, key or value, that holds a NUL character (escaped: raw control
// characters are a syntax error), bytes that are not UTF-8, or an unpaired
// UTF-16 surrogate escape, with the path of its field in the API's
// notation ("message", "weights.<key>", "spec.services[0].name"); a bad
// key is named by its path with the key quoted Go-style. It stops quietly
// at a syntax error (the decoder reports those).
func textErrors(body []byte) []apiv1.FieldError {
	if plainText(body) {
		return nil
	}
	var stack []*textFrame
	var errs []apiv1.FieldError
	// path of the value being read, given the current stack.
	path := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.object {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				fmt.Fprintf(&b, "[%d]", f.index)
			}
		}
		return b.String()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return errs
		}
		var top *textFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				stack = append(stack, &textFrame{object: d == '{', isKey: d == '{'})
			case '}', ']':
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					stack[len(stack)-1].valueDone()
				}
			}
			continue
		}
		if str, ok := tok.(string); ok {
			isKey := top != nil && top.object && top.isKey
			if isKey {
				top.key = displayKey(str, body[start:dec.InputOffset()])
				top.isKey = false
			}
			if msg := rawStringFault(body[start:dec.InputOffset()], str); msg != "" {
				p := path()
				if isKey {
					msg = "the key " + msg
				}
				errs = append(errs, apiv1.FieldError{Path: p, Message: msg})
			}
			if isKey {
				continue
			}
		}
		if top != nil {
			top.valueDone()
		}
	}
}

// plainText reports that body cannot hold what textErrors looks for, so
// that the walk over the tokens of every publish is left to the few bodies
// that may: body is valid UTF-8 and holds no \u escape that could be a NUL
// (\u0000) or a UTF-16 surrogate (\uD...). It may report false for a body
// without a fault (a surrogate pair, an escaped backslash before "u0000"),
// never true for one with a fault.
func plainText(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for rest := body; ; {
		i := bytes.Index(rest, []byte(`\u`))
		if i < 0 {
			return true
		}
		rest = rest[i+2:]
		if len(rest) < 4 || bytes.HasPrefix(rest, []byte("0000")) || rest[0] == 'd' || rest[0] == 'D' {
			return false
		}
	}
}

// textFrame is one open object or array of the document textErrors walks.
type textFrame struct {
	object bool
	key    string // objects: the last key read, as a path shows it
	index  int    // arrays: the index of the next value
	isKey  bool   // objects: the next string token is a key
}

// valueDone moves f past one of its values.
func (f *textFrame) valueDone() {
	if f.object {
		f.isKey = true
	} else {
		f.index++
	}
}

// displayKey is a key as a path shows it: as it is when it is printable
// UTF-8 without separators, else Go-quoted, so that a path never carries a
// NUL or invalid UTF-8 itself. raw is the key's token as sent (with what
// came before it): a key sent with bytes that are not UTF-8 and no escapes
// is quoted from those bytes ("\xfe"), not from the decoder's U+FFFD.
func displayKey(k string, raw []byte) string {
	if q := bytes.IndexByte(raw, '"'); q >= 0 {
		if lit := raw[q+1:]; len(lit) > 0 && lit[len(lit)-1] == '"' && !utf8.Valid(lit) && bytes.IndexByte(lit, '\\') < 0 {
			return strconv.Quote(string(lit[:len(lit)-1]))
		}
	}
	for _, c := range k {
		if c == utf8.RuneError || c < ' ' || c == 0x7f || c == '.' || c == '[' || c == ']' || c == '"' {
			return strconv.Quote(k)
		}
	}
	return k
}

// rawStringFault checks the raw bytes of one string token (with whatever
// white space and separators came before it) and its decoded value str:
// the reason it cannot be stored, "" when it can.
func rawStringFault(raw []byte, str string) string {
	if strings.IndexByte(str, 0) >= 0 {
		return msgNUL
	}
	q := bytes.IndexByte(raw, '"')
	if q < 0 {
		return ""
	}
	lit := raw[q+1:]
	for i := 0; i < len(lit); {
		c := lit[i]
		switch {
		case c == '"':
			return ""
		case c == '\\':
			if i+1 >= len(lit) {
				return ""
			}
			if lit[i+1] != 'u' {
				i += 2
				continue
			}
			u, ok := hex4(lit[i+2:])
			if !ok {
				return ""
			}
			i += 6
			switch {
			case u >= 0xD800 && u < 0xDC00: // high surrogate: a low one must follow
				if i+1 < len(lit) && lit[i] == '\\' && lit[i+1] == 'u' {
					if lo, ok := hex4(lit[i+2:]); ok && lo >= 0xDC00 && lo < 0xE000 {
						i += 6
						continue
					}
				}
				return msgLone
			case u >= 0xDC00 && u < 0xE000:
				return msgLone
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(lit[i:])
			if r == utf8.RuneError && size <= 1 {
				return msgInvalid
			}
			i += size
		}
	}
	return ""
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[:4]), 16, 16)
	return rune(n), err == nil
}
