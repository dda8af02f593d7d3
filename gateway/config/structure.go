package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// The structural check walks the JSON token stream against the shape of the
// Spec types (derived from their json tags), so that syntax errors, values of
// the wrong type, duplicate and unknown fields are all reported with their
// field path and all at once, which encoding/json cannot do: it stops at the
// first error and names fields by Go-ish dotted paths without indexes.

// kind is the JSON type a Go field accepts.
type kind int

const (
	kindObject kind = iota
	kindArray
	kindString
	kindInteger
	kindNumber
	kindBoolean
)

// shape is the JSON form of a Go type.
type shape struct {
	kind   kind
	fields []shapeField // kindObject, in declaration order
	elem   *shape       // kindArray, and kindObject with keyed
	// keyed is a kindObject of any member names, each of shape elem (a Go
	// map with string keys).
	keyed bool
}

type shapeField struct {
	name  string
	shape *shape
}

func (sh *shape) field(name string) *shape {
	if sh.keyed {
		return sh.elem
	}
	for _, f := range sh.fields {
		if f.name == name {
			return f.shape
		}
	}
	return nil
}

func (sh *shape) fieldNames() string {
	names := make([]string, len(sh.fields))
	for i, f := range sh.fields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// specShape is the shape of Spec, built once.
var specShape = sync.OnceValue(func() *shape {
	return shapeOf(reflect.TypeFor[Spec]())
})

// shapeOf derives the shape of the config types. It supports exactly the
// kinds they use and panics on anything else, which a test catches the moment
// spec.go grows a field of a new kind.
func shapeOf(t reflect.Type) *shape {
	switch t.Kind() {
	case reflect.Pointer:
		return shapeOf(t.Elem())
	case reflect.Slice:
		return &shape{kind: kindArray, elem: shapeOf(t.Elem())}
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			panic(fmt.Sprintf("config: unsupported map key type %s", t.Key()))
		}
		return &shape{kind: kindObject, keyed: true, elem: shapeOf(t.Elem())}
	case reflect.String:
		return &shape{kind: kindString}
	case reflect.Int:
		return &shape{kind: kindInteger}
	case reflect.Float64:
		return &shape{kind: kindNumber}
	case reflect.Bool:
		return &shape{kind: kindBoolean}
	case reflect.Struct:
		sh := &shape{kind: kindObject}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || name == "-" || name == "" {
				panic(fmt.Sprintf("config: field %s.%s needs a json name", t.Name(), f.Name))
			}
			sh.fields = append(sh.fields, shapeField{name: name, shape: shapeOf(f.Type)})
		}
		return sh
	default:
		panic(fmt.Sprintf("config: unsupported field type %s", t))
	}
}

func (k kind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindInteger:
		return "an integer"
	case kindNumber:
		return "a number"
	default:
		return "a boolean"
	}
}

// checker walks one JSON document.
type checker struct {
	data  []byte
	dec   *json.Decoder
	probs problems
	// usable is false once a problem makes the document unfit to decode
	// (syntax, type or duplicate field); unknown fields are only dropped.
	usable bool
	// malformed is true once a syntax error was found.
	malformed bool
	// keep makes value build the document it read (what checkStructure
	// returns); without it, value returns present for any value kept.
	keep bool
}

// present is what value returns for a value it keeps, when the checker
// does not build the document.
var present any = true

// errSyntax stops the walk; the problem is already recorded.
var errSyntax = errors.New("syntax error")

// checkStructure checks data against the shape of Spec. It returns the
// problems found, whether the document is usable (false when any problem
// other than an unknown field was found) and whether it is malformed (a
// syntax error); with keep, also the document with unknown fields and nulls
// removed (ready to be encoded and decoded), nil without.
func checkStructure(data []byte, keep bool) (any, problems, bool, bool) {
	c := &checker{data: data, dec: json.NewDecoder(bytes.NewReader(data)), usable: true, keep: keep}
	if t := bytes.TrimSpace(data); len(t) == 0 || string(t) == "null" {
		// An empty body, an empty YAML document, or JSON null.
		c.fail("", "the spec is empty; expected an object with upstreams and services")
		return nil, c.probs, false, false
	}
	c.dec.UseNumber()
	v, err := c.value(specShape(), "", true)
	if err == nil {
		c.end("the spec")
	}
	return v, c.probs, c.usable, c.malformed
}

func (c *checker) fail(path, format string, args ...any) {
	c.usable = false
	c.probs.add(path, format, args...)
}

// token reads the next token; a syntax error is recorded at path.
func (c *checker) token(path string) (json.Token, error) {
	tok, err := c.dec.Token()
	if err == nil {
		return tok, nil
	}
	c.syntax(path, err)
	return nil, errSyntax
}

// syntax records a syntax error with its line and column.
func (c *checker) syntax(path string, err error) {
	off := c.dec.InputOffset()
	var se *json.SyntaxError
	msg := err.Error()
	switch {
	case errors.As(err, &se):
		off = se.Offset
		// The offset of a Decoder's SyntaxError is not the input's when
		// it decodes a value mid-stream (the envelope's spec); the
		// input's first syntax error is this one, at its true offset.
		var whole *json.SyntaxError
		if errors.As(json.Unmarshal(c.data, new(any)), &whole) {
			off = whole.Offset - 1 // Unmarshal's counts the bad byte
		}
		msg = strings.TrimPrefix(se.Error(), "json: ")
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		off = int64(len(c.data))
		msg = "unexpected end of input"
	}
	line, col := position(c.data, off)
	c.malformed = true
	c.fail(path, "invalid JSON at line %d, column %d: %s", line, col, msg)
}

// end checks that nothing follows the document, which it calls what.
func (c *checker) end(what string) {
	off := c.dec.InputOffset()
	_, err := c.dec.Token()
	if errors.Is(err, io.EOF) {
		return
	}
	// Point at the first byte after the spec that is not white space.
	for int(off) < len(c.data) && isSpace(c.data[off]) {
		off++
	}
	line, col := position(c.data, off)
	c.malformed = true
	c.fail("", "unexpected data after %s at line %d, column %d", what, line, col)
}

// badText reports whether raw, the JSON text of a string (with what
// precedes it), holds invalid UTF-8 or a \u escape of a lone surrogate.
func badText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	for i := 0; i+5 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // an escaped character, a backslash included
			continue
		}
		u, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			continue
		}
		switch {
		case u >= 0xD800 && u < 0xDC00: // a high surrogate: a low one must follow
			if i+11 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 16); err == nil && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return true
		case u >= 0xDC00 && u < 0xE000:
			return true
		}
		i += 5
	}
	return false
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\r' || b == '\n' }

// position converts a byte offset to a 1-based line and column.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// value reads one value expected to have shape sh. It returns the value to
// keep (nil for null, which means "absent", or for a value of the wrong type)
// and errSyntax when the walk cannot continue. element is true for array
// elements and the document itself, where null is not allowed.
func (c *checker) value(sh *shape, path string, element bool) (any, error) {
	start := c.dec.InputOffset()
	tok, err := c.token(path)
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch {
		case t == '{' && sh.kind == kindObject:
			return c.object(sh, path)
		case t == '[' && sh.kind == kindArray:
			return c.array(sh, path)
		}
		got := "an object"
		if t == '[' {
			got = "an array"
		}
		c.fail(path, "must be %s, got %s", sh.kind, got)
		return nil, c.skip(path)
	case nil:
		if element {
			c.fail(path, "must be %s, got null", sh.kind)
		}
		return nil, nil
	case string:
		if strings.ContainsRune(t, utf8.RuneError) && badText(c.data[start:c.dec.InputOffset()]) {
			// The decoder made U+FFFD of invalid UTF-8 or of a lone
			// surrogate escape: refuse it rather than store what was not
			// sent.
			c.fail(path, "must be valid UTF-8 text (invalid bytes or a lone \\u surrogate escape)")
			return nil, nil
		}
		if sh.kind == kindString {
			return tok, nil
		}
		c.fail(path, "must be %s, got a string", sh.kind)
	case bool:
		if sh.kind == kindBoolean {
			return tok, nil
		}
		c.fail(path, "must be %s, got a boolean", sh.kind)
	case json.Number:
		return c.number(sh, path, t)
	}
	return nil, nil
}

// number checks a number against an integer or float field.
func (c *checker) number(sh *shape, path string, n json.Number) (any, error) {
	switch sh.kind {
	case kindInteger:
		if _, err := strconv.ParseInt(n.String(), 10, strconv.IntSize); err != nil {
			if errors.Is(err, strconv.ErrRange) {
				c.fail(path, "integer %s is out of range", quote(n.String()))
			} else {
				c.fail(path, "must be an integer, got %s", quote(n.String()))
			}
			return nil, nil
		}
		return n, nil
	case kindNumber:
		if _, err := strconv.ParseFloat(n.String(), 64); err != nil {
			c.fail(path, "number %s is out of range", quote(n.String()))
			return nil, nil
		}
		return n, nil
	}
	c.fail(path, "must be %s, got a number", sh.kind)
	return nil, nil
}

// object reads the members of an object after its "{".
func (c *checker) object(sh *shape, path string) (any, error) {
	var out map[string]any
	if c.keep {
		out = make(map[string]any, len(sh.fields))
	}
	seen := make(map[string]bool, len(sh.fields))
	for c.dec.More() {
		tok, err := c.token(path)
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string) // the decoder guarantees a string key here
		p := member(path, key)
		fs := sh.field(key)
		switch {
		case seen[key]:
			c.fail(p, "duplicate field")
			if err := c.discard(p); err != nil {
				return nil, err
			}
			continue
		case fs == nil:
			c.probs.add(p, "unknown field; allowed: %s", sh.fieldNames())
			if err := c.discard(p); err != nil {
				return nil, err
			}
			continue
		}
		seen[key] = true
		v, err := c.value(fs, p, false)
		if err != nil {
			return nil, err
		}
		if v != nil && c.keep {
			out[key] = v
		}
	}
	if _, err := c.token(path); err != nil { // "}"
		return nil, err
	}
	if !c.keep {
		return present, nil
	}
	return out, nil
}

// array reads the elements of an array after its "[".
func (c *checker) array(sh *shape, path string) (any, error) {
	out := []any{}
	for i := 0; c.dec.More(); i++ {
		v, err := c.value(sh.elem, index(path, i), true)
		if err != nil {
			return nil, err
		}
		if c.keep {
			out = append(out, v)
		}
	}
	if _, err := c.token(path); err != nil { // "]"
		return nil, err
	}
	if !c.keep {
		return present, nil
	}
	return out, nil
}

// discard reads and drops one value of any shape.
func (c *checker) discard(path string) error {
	tok, err := c.token(path)
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); ok && (d == '{' || d == '[') {
		return c.skip(path)
	}
	return nil
}

// skip drops the rest of a container whose opening delimiter was just read.
// It loops instead of recursing, so deep nesting costs no stack.
func (c *checker) skip(path string) error {
	for depth := 1; depth > 0; {
		tok, err := c.token(path)
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
