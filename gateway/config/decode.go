package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// This file is the one decoder of Dwara's documents: every spec and every
// publish body, from the API, the CLI or a spec file, is read here. YAML is
// turned into JSON once (strictly: duplicate keys and extra documents are
// refused with their line), then JSON is checked token by token against the
// shape of the types, so that every problem is reported at once with its
// field path.

// Format is the syntax of a document.
type Format int

const (
	// FormatAuto reads a document whose first non-blank byte is "{" or "["
	// as JSON and anything else as YAML. (JSON is a subset of YAML, but
	// reading a broken JSON document as YAML would accept things JSON
	// refuses, such as a trailing comma, and report the rest in YAML terms;
	// a flow-style YAML document must be read with FormatYAML.)
	FormatAuto Format = iota
	// FormatJSON reads JSON.
	FormatJSON
	// FormatYAML reads YAML (and therefore JSON) with the JSON field names.
	FormatYAML
)

// Envelope is a spec with the message that goes with it: the body of a
// publish, {"message": "...", "spec": {...}}, in JSON or YAML.
type Envelope struct {
	// Message says why; "" when the document has none.
	Message string
	// Spec is the parsed, defaulted and validated spec; never nil when the
	// envelope parsed.
	Spec *Spec
}

// Parse decodes a spec in JSON or YAML (FormatAuto), applies Defaults and
// runs Validate.
//
// Parsing is strict: unknown fields (at any depth), duplicate fields or keys,
// values of the wrong type, a second YAML document and data after the spec
// are errors. Every error is a *ValidationError. It lists every structural
// problem (syntax, type, unknown or duplicate field) and, when the structure
// was usable, every validation problem too, so one round trip shows the
// operator everything to fix. Structural problems come first, in document
// order, then validation problems. Parse is safe for concurrent use.
func Parse(data []byte) (*Spec, error) {
	return ParseAs(data, FormatAuto)
}

// ParseAs is Parse for a document of format f.
func ParseAs(data []byte, f Format) (*Spec, error) {
	js, err := toJSON(data, f)
	if err != nil {
		return nil, err
	}
	return parseJSON(js, false)
}

// ParseEnvelope decodes a publish body of format f: an object whose only
// fields are "message" (a string, optional) and "spec" (required), each at
// most once. The spec is parsed as by Parse; problems of the envelope and of
// the spec are reported together in one *ValidationError, the spec's with
// paths relative to the spec ("services[0].name").
//
// A publish body's computed fields are not the client's to set: the slot
// table of every split (split.slots) is dropped before validation, since the
// API computes it from the parent generation (Allocate). So a spec read from
// the API can be edited and published back as it is.
func ParseEnvelope(data []byte, f Format) (Envelope, error) {
	js, err := toJSON(data, f)
	if err != nil {
		return Envelope{}, err
	}
	return parseEnvelope(js)
}

// ParseDocument decodes what an operator keeps in a file (format detected
// as by Parse): a spec, or a whole publish body (an object whose fields are
// only "message" and "spec", with "spec" present), which is parsed as by
// ParseEnvelope. Either way, as in ParseEnvelope, every split's computed
// slots are dropped before validation.
func ParseDocument(data []byte) (Envelope, error) {
	js, err := toJSON(data, FormatAuto)
	if err != nil {
		return Envelope{}, err
	}
	if isEnvelope(js) {
		return parseEnvelope(js)
	}
	spec, err := parseJSON(js, true)
	if err != nil {
		return Envelope{}, err
	}
	return Envelope{Spec: spec}, nil
}

// toJSON returns data as JSON: JSON input as it is, YAML converted. A YAML
// document that cannot be converted is a *ValidationError. A UTF-8 byte
// order mark at the start, which some editors write, is ignored (RFC 8259
// section 8.1 allows a parser to).
func toJSON(data []byte, f Format) ([]byte, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	if f == FormatAuto {
		f = FormatYAML
		if looksLikeJSON(data) {
			f = FormatJSON
		}
	}
	if f == FormatJSON || len(bytes.TrimSpace(data)) == 0 {
		return data, nil
	}
	js, fe, malformed := yamlToJSON(data)
	if fe != nil {
		return nil, &ValidationError{Errors: []FieldError{*fe}, Malformed: malformed}
	}
	return js, nil
}

// utf8BOM is the UTF-8 encoding of U+FEFF, the byte order mark.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// looksLikeJSON reports whether the first non-blank byte opens a JSON object
// or array.
func looksLikeJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// yamlToJSON converts one YAML document to JSON. On failure it returns the
// problem, and malformed is true when the YAML could not be read at all
// (as opposed to a readable document with a duplicate key or a second
// document).
func yamlToJSON(data []byte) (js []byte, fe *FieldError, malformed bool) {
	defer func() {
		// The YAML libraries are third-party code fed with operator input;
		// a panic in them must not take the API down.
		if r := recover(); r != nil {
			js, fe, malformed = nil, &FieldError{Message: fmt.Sprintf("invalid YAML: %v", r)}, true
		}
	}()
	if fe := checkYAML(data); fe != nil {
		return nil, fe, false
	}
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "yaml: ")
		// One line, for the error list: the library indents a list of
		// problems over several lines.
		msg = "invalid YAML: " + strings.Join(strings.Fields(msg), " ")
		return nil, &FieldError{Message: msg}, !strings.Contains(msg, "already set in map")
	}
	return js, nil, false
}

// checkYAML finds what the converter would not report, or not report with
// a path: a key repeated in one mapping (with its path and line) and a
// non-empty document after the first (with its line). A stream the parser
// cannot read is left to the converter, which reports the syntax error.
// Aliases are not followed, so an alias bomb costs nothing here.
func checkYAML(data []byte) *FieldError {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for n := 0; ; n++ {
		var doc yamlv3.Node
		err := dec.Decode(&doc)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil && n == 0:
			return nil // a syntax error the converter reports
		case err != nil:
			// Something after the first document that is not a document
			// the parser can read; the converter would ignore it.
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			return &FieldError{Message: "invalid YAML: data after the first document (" + msg + "); a spec is one document"}
		}
		if n > 0 && !emptyDocument(&doc) {
			return &FieldError{Message: fmt.Sprintf("invalid YAML: a second document starts at line %d; a spec is one document", documentLine(&doc))}
		}
		if n == 0 {
			if fe := duplicateKey(&doc, ""); fe != nil {
				return fe
			}
		}
	}
}

func emptyDocument(doc *yamlv3.Node) bool {
	if doc.Kind != yamlv3.DocumentNode || len(doc.Content) == 0 {
		return true
	}
	c := doc.Content[0]
	return c.Kind == yamlv3.ScalarNode && c.Tag == "!!null" && (c.Value == "" || c.Value == "~" || c.Value == "null")
}

// documentLine is the line where doc's content starts.
func documentLine(doc *yamlv3.Node) int {
	if len(doc.Content) > 0 {
		return doc.Content[0].Line
	}
	return doc.Line
}

// duplicateKey walks a node tree and reports the first key repeated within
// one mapping, with the path of the mapping.
func duplicateKey(n *yamlv3.Node, path string) *FieldError {
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			if fe := duplicateKey(c, path); fe != nil {
				return fe
			}
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			if fe := duplicateKey(c, index(path, i)); fe != nil {
				return fe
			}
		}
	case yamlv3.MappingNode:
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yamlv3.ScalarNode || k.Tag == "!!merge" {
				continue
			}
			p := member(path, k.Value)
			if first, dup := seen[k.Value]; dup {
				return &FieldError{Path: p, Message: fmt.Sprintf("duplicate key at line %d (first at line %d)", k.Line, first)}
			}
			seen[k.Value] = k.Line
			if fe := duplicateKey(v, p); fe != nil {
				return fe
			}
		}
	}
	return nil
}

// envelopeFields are the fields of a publish body.
const envelopeFields = "message, spec"

// isEnvelope reports whether js is an object whose fields are only
// "message" and "spec", with "spec" among them.
func isEnvelope(js []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(js, &top) != nil {
		return false
	}
	if _, ok := top["spec"]; !ok {
		return false
	}
	for k := range top {
		if k != "message" && k != "spec" {
			return false
		}
	}
	return true
}

// parseEnvelope checks the envelope's own fields strictly (each at most
// once, nothing else, message a string, spec present) and parses the spec.
func parseEnvelope(data []byte) (Envelope, error) {
	c := &checker{data: data, dec: json.NewDecoder(bytes.NewReader(data)), usable: true}
	if t := bytes.TrimSpace(data); len(t) == 0 || string(t) == "null" {
		c.fail("", "the body is empty; expected an object with message and spec")
		return Envelope{}, c.probs.err()
	}
	var env Envelope
	var spec json.RawMessage
	err := func() error {
		tok, err := c.token("")
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); !ok || d != '{' {
			c.fail("", "must be an object with message and spec")
			return errSyntax
		}
		seen := map[string]bool{}
		for c.dec.More() {
			tok, err := c.token("")
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			if seen[key] {
				line, _ := position(data, c.dec.InputOffset())
				c.fail(key, "duplicate field at line %d", line)
				if err := c.discard(key); err != nil {
					return err
				}
				continue
			}
			seen[key] = true
			switch key {
			case "message":
				tok, err := c.token(key)
				if err != nil {
					return err
				}
				switch t := tok.(type) {
				case string:
					env.Message = t
				case nil:
				default:
					c.fail(key, "must be a string")
					if d, ok := t.(json.Delim); ok && (d == '{' || d == '[') {
						if err := c.skip(key); err != nil {
							return err
						}
					}
				}
			case "spec":
				if err := c.dec.Decode(&spec); err != nil {
					c.syntax(key, err)
					return errSyntax
				}
			default:
				c.fail(key, "unknown field; allowed: %s", envelopeFields)
				if err := c.discard(key); err != nil {
					return err
				}
			}
		}
		if _, err := c.token(""); err != nil { // "}"
			return err
		}
		c.end("the body")
		return nil
	}()
	if err == nil && (len(spec) == 0 || string(spec) == "null") && !seen(c.probs, "spec") {
		c.fail("spec", "is required")
	}
	if !c.usable {
		return Envelope{}, &ValidationError{Errors: c.probs, Malformed: c.malformed}
	}
	s, err := parseJSON(spec, true)
	if err != nil {
		return Envelope{}, err
	}
	env.Spec = s
	return env, nil
}

// seen reports whether probs already has a problem at path.
func seen(probs problems, path string) bool {
	for _, p := range probs {
		if p.Path == path {
			return true
		}
	}
	return false
}

// parseJSON runs the strict structural check, decodes what survived it,
// applies defaults and validates; dropSlots removes every split's computed
// slot table first.
//
// A document the check found nothing wrong with is decoded as it is: it
// has only known fields, each once, of the right types, in valid text, so
// it decodes to what the check would keep of it (a null member decodes as
// absent). Only a document with unknown fields, which are reported but do
// not stop validation, is walked again to drop them and re-encoded.
func parseJSON(data []byte, dropSlots bool) (*Spec, error) {
	_, probs, usable, malformed := checkStructure(data, false)
	if !usable {
		return nil, &ValidationError{Errors: probs, Malformed: malformed}
	}
	cleaned := data
	if len(probs) > 0 {
		clean, _, _, _ := checkStructure(data, true)
		var err error
		if cleaned, err = json.Marshal(clean); err != nil {
			// Everything in clean came out of a JSON decoder; reaching
			// this is a bug in the checker, reported rather than hidden.
			probs.add("", "cannot re-encode spec: %v", err)
			return nil, probs.err()
		}
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(cleaned))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		// checkStructure accepts only what decodes; reaching this is a bug
		// in the checker, reported rather than hidden.
		probs.add("", "cannot decode spec: %v", err)
		return nil, probs.err()
	}
	if dropSlots {
		DropSlots(&s)
	}
	s.Defaults()
	if err := s.Validate(); err != nil {
		var ve *ValidationError
		if !errors.As(err, &ve) {
			return nil, err
		}
		probs = append(probs, ve.Errors...)
	}
	if len(probs) > 0 {
		return nil, probs.err()
	}
	return &s, nil
}

// UnmarshalJSON decodes a split target. An absent (or null) weight means 1,
// an explicit 0 stays 0. Unknown fields are refused even when the caller's
// decoder does not disallow them, because a custom unmarshaler does not
// inherit that setting.
func (t *Target) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil
	}
	type plain Target // no methods, so no recursion
	p := plain{Weight: 1}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("decode split target: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("decode split target: unexpected data after the target")
	}
	*t = Target(p)
	return nil
}
