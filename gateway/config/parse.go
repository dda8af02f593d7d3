package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// Parse decodes a spec written in JSON or YAML, applies Defaults and runs
// Validate. Input whose first non-blank byte is "{" or "[" is read as JSON,
// anything else as YAML. (JSON is a subset of YAML, but reading a broken JSON
// document as YAML would accept things JSON refuses, such as a trailing comma,
// and report the rest in YAML terms; a flow-style YAML document must go
// through ParseYAML.)
//
// Parsing is strict: unknown fields (at any depth), duplicate fields, values of
// the wrong type and data after the spec are errors. Every error is a
// *ValidationError. It lists every structural problem (syntax, type, unknown
// or duplicate field) and, when the structure was usable, every validation
// problem too, so one round trip shows the operator everything to fix.
// Structural problems come first, in document order, then validation
// problems. Parse is safe for concurrent use.
func Parse(data []byte) (*Spec, error) {
	if looksLikeJSON(data) {
		return ParseJSON(data)
	}
	return ParseYAML(data)
}

// ParseJSON is Parse for input known to be JSON.
func ParseJSON(data []byte) (*Spec, error) {
	return parseJSON(data)
}

// ParseYAML is Parse for input known to be YAML. The YAML is converted to
// JSON with sigs.k8s.io/yaml (duplicate keys are refused) and then decoded
// like JSON, so field names and rules are the same. Only the first document
// of a multi-document stream is read; a second one is an error.
func ParseYAML(data []byte) (*Spec, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return parseJSON(nil) // reports the empty spec
	}
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, &ValidationError{Errors: []FieldError{{Message: err.Error()}}}
	}
	return parseJSON(js)
}

// yamlToJSON converts one YAML document to JSON.
func yamlToJSON(data []byte) (js []byte, err error) {
	defer func() {
		// The YAML library is third-party code fed with operator input;
		// a panic in it must not take the API down.
		if r := recover(); r != nil {
			js, err = nil, fmt.Errorf("invalid YAML: %v", r)
		}
	}()
	if extraDocuments(data) {
		return nil, errors.New("invalid YAML: data after the first document; a spec is one document")
	}
	js, err = yaml.YAMLToJSONStrict(data)
	if err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
		msg = strings.TrimPrefix(msg, "yaml: ")
		// One line, for the error list: the library indents a list of
		// problems over several lines.
		return nil, fmt.Errorf("invalid YAML: %s", strings.Join(strings.Fields(msg), " "))
	}
	return js, nil
}

// extraDocuments reports whether a YAML stream holds a non-empty document
// after the first one. The converter reads only the first document, so
// without this check the rest would be silently ignored. Syntax errors are
// left to the converter, which reports them.
func extraDocuments(data []byte) bool {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	for n := 0; ; n++ {
		var v any
		if err := dec.Decode(&v); err != nil {
			return n > 0 && !errors.Is(err, io.EOF)
		}
		if n > 0 && v != nil {
			return true
		}
	}
}

// looksLikeJSON reports whether the first non-blank byte opens a JSON object
// or array.
func looksLikeJSON(data []byte) bool {
	t := bytes.TrimLeft(data, " \t\r\n")
	return len(t) > 0 && (t[0] == '{' || t[0] == '[')
}

// parseJSON runs the strict structural check, decodes what survived it,
// applies defaults and validates.
func parseJSON(data []byte) (*Spec, error) {
	clean, probs, usable := checkStructure(data)
	if !usable {
		return nil, probs.err()
	}
	cleaned, err := json.Marshal(clean)
	if err != nil {
		// Everything in clean came out of a JSON decoder; reaching this is
		// a bug in the checker, reported rather than hidden.
		probs.add("", "cannot re-encode spec: %v", err)
		return nil, probs.err()
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
