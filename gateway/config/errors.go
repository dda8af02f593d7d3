package config

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// FieldError is one problem of a spec. Path names the field in the notation
// an operator writes ("services[0].split.targets[1].upstream"); it is empty
// for problems of the document as a whole, such as a syntax error before the
// first field. Message says what is wrong and what is allowed.
type FieldError struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

// String formats e as "path: message", or just the message when Path is
// empty.
func (e FieldError) String() string {
	if e.Path == "" {
		return e.Message
	}
	return e.Path + ": " + e.Message
}

// ValidationError carries every problem found in a spec, in the order they
// were met walking the spec top-down. The decoder (Parse and its kin),
// Validate and the spec edits return it as a *ValidationError; callers reach
// it with errors.As.
type ValidationError struct {
	Errors []FieldError
	// Malformed is true when the document could not be read at all (a JSON
	// or YAML syntax error, or data after it), as opposed to a readable
	// document with problems. The API answers the first with 400 and the
	// second with 422.
	Malformed bool
}

// Error joins the problems as "path: message; path: message".
func (e *ValidationError) Error() string {
	if len(e.Errors) == 0 {
		return "invalid spec"
	}
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.String()
	}
	return strings.Join(parts, "; ")
}

// problems collects FieldErrors in the order they are found.
type problems []FieldError

func (p *problems) add(path, format string, args ...any) {
	*p = append(*p, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// err returns nil when nothing was collected, else a *ValidationError.
func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &ValidationError{Errors: p}
}

// maxQuoted bounds how much of an operator's value is echoed in a message, so
// a megabyte-long name does not produce a megabyte-long error.
const maxQuoted = 80

// quote returns s as a Go string literal, shortened to maxQuoted runes.
func quote(s string) string {
	if utf8.RuneCountInString(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	r := []rune(s)
	return fmt.Sprintf("%q...", string(r[:maxQuoted]))
}

// index formats an element path: index("upstreams", 2) is "upstreams[2]".
func index(path string, i int) string {
	return fmt.Sprintf("%s[%d]", path, i)
}

// member formats a field path: member("services[0]", "split") is
// "services[0].split"; at the root it is just the field name.
func member(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
