package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

// Media types the API reads and writes.
const (
	contentJSON    = "application/json"
	contentProblem = "application/problem+json"
	contentYAML    = "application/yaml"
)

// yamlTypes are the Content-Types accepted for a YAML request body.
var yamlTypes = []string{"application/yaml", "application/x-yaml", "text/yaml"}

// problemf returns an about:blank Problem for status with a formatted detail.
func problemf(status int, format string, args ...any) *apiv1.Problem {
	return &apiv1.Problem{
		Type:   "about:blank",
		Title:  http.StatusText(status),
		Status: status,
		Detail: fmt.Sprintf(format, args...),
	}
}

// fieldProblem returns a Problem for status listing one field error.
func fieldProblem(status int, path, format string, args ...any) *apiv1.Problem {
	p := problemf(status, "invalid %s", path)
	p.Errors = []apiv1.FieldError{{Path: path, Message: fmt.Sprintf(format, args...)}}
	return p
}

// validationProblem turns a *config.ValidationError into a 422 Problem
// listing every error.
func validationProblem(detail string, v *config.ValidationError) *apiv1.Problem {
	p := problemf(http.StatusUnprocessableEntity, "%s", detail)
	p.Errors = fieldErrors(v.Errors)
	if len(p.Errors) == 0 {
		p.Errors = []apiv1.FieldError{{Path: "spec", Message: v.Error()}}
	}
	return p
}

// fieldErrors converts the data plane's field errors to their wire type.
func fieldErrors(errs []config.FieldError) []apiv1.FieldError {
	out := make([]apiv1.FieldError, len(errs))
	for i, e := range errs {
		out[i] = apiv1.FieldError{Path: e.Path, Message: e.Message}
	}
	return out
}

// marshal encodes v as JSON with a trailing newline, leaving <, > and &
// unescaped so that terminal readers see "95->90".
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeJSON writes v as the JSON body of a status answer.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	body, err := marshal(v)
	if err != nil {
		s.internalError(w, r, fmt.Errorf("encode response: %w", err))
		return
	}
	w.Header().Set("Content-Type", contentJSON)
	w.WriteHeader(status)
	if _, err := w.Write(body); err != nil {
		s.log.DebugContext(r.Context(), "write response", "request_id", requestID(r.Context()), "err", err)
	}
}

// writeProblem writes p as an application/problem+json answer and notes it
// on the call's audit record, if any.
func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, p *apiv1.Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	p.Instance = r.URL.Path
	p.RequestID = requestID(r.Context())
	if rec := auditFrom(r.Context()); rec != nil {
		rec.problem = p
	}
	body, err := marshal(p)
	if err != nil { // a Problem always encodes; keep the answer well-formed anyway
		body = []byte(`{"type":"about:blank","title":"Internal Server Error","status":500}` + "\n")
	}
	w.Header().Set("Content-Type", contentProblem)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	if _, err := w.Write(body); err != nil {
		s.log.DebugContext(r.Context(), "write problem", "request_id", p.RequestID, "err", err)
	}
}

// writeError writes err: a *apiv1.Problem as it is, anything else as a 500 that
// is logged but never shown to the client.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if p, ok := errors.AsType[*apiv1.Problem](err); ok {
		s.writeProblem(w, r, p)
		return
	}
	s.internalError(w, r, err)
}

// internalError answers err, which is not a Problem: 503 with Retry-After
// when it means the database is unavailable (db.IsUnavailable), else a 500
// that names only the request id. Either way the cause is logged.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if db.IsUnavailable(err) {
		s.unavailable(w, r, err)
		return
	}
	id := requestID(r.Context())
	s.log.ErrorContext(r.Context(), "request failed", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	s.writeProblem(w, r, problemf(http.StatusInternalServerError,
		"the request failed; the server log has the details under request id %s", id))
}

// retryAfterSeconds is the Retry-After of a 503 answer.
const retryAfterSeconds = 5

// unavailable logs err and answers 503 with Retry-After: the database did
// not answer (in time); the call may be made again later.
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	id := requestID(r.Context())
	s.log.WarnContext(r.Context(), "database unavailable", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	if rec := auditFrom(r.Context()); rec != nil {
		rec.unavailable = true
	}
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
	s.writeProblem(w, r, problemf(http.StatusServiceUnavailable,
		"the database is unavailable or did not answer within %s; retry in %d seconds", s.dbTimeout, retryAfterSeconds))
}

// readBody reads the whole (capped) request body. A body over apiv1.MaxBodyBytes
// is a 413 Problem.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, problemf(http.StatusRequestEntityTooLarge, "the request body exceeds %d bytes", apiv1.MaxBodyBytes)
		}
		return nil, problemf(http.StatusBadRequest, "reading the request body failed")
	}
	return body, nil
}

// mediaType returns the lowercased media type of the request's
// Content-Type without parameters: "" and no error when there is none, the
// parser's error when it does not parse (a parameter included:
// "application/json;;" is malformed, not JSON).
func mediaType(r *http.Request) (string, error) {
	v := r.Header.Get("Content-Type")
	if strings.TrimSpace(v) == "" {
		return "", nil
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return "", err
	}
	return strings.ToLower(mt), nil
}

// maxQuotedType caps how much of a refused Content-Type a problem repeats.
const maxQuotedType = 100

// unsupported returns the 415 Problem for the Content-Type of r, as it was
// sent, where only the accepted types may be sent.
func unsupported(r *http.Request, accepted ...string) *apiv1.Problem {
	send := strings.Join(accepted, " or ")
	raw := r.Header.Get("Content-Type")
	if strings.TrimSpace(raw) == "" {
		return problemf(http.StatusUnsupportedMediaType,
			"the request has no Content-Type; send %s (an empty body too)", send)
	}
	quoted := strconv.Quote(raw)
	if len(raw) > maxQuotedType {
		quoted = strconv.Quote(strings.ToValidUTF8(raw[:maxQuotedType], "\uFFFD")) + "..."
	}
	if _, err := mediaType(r); err != nil {
		return problemf(http.StatusUnsupportedMediaType,
			"Content-Type %s is malformed (%s); send %s", quoted, strings.TrimPrefix(err.Error(), "mime: "), send)
	}
	return problemf(http.StatusUnsupportedMediaType, "Content-Type %s is not accepted here; send %s", quoted, send)
}

// readJSON decodes the request body, which must be application/json, into
// v: unknown fields and trailing data are refused. When optional is true an
// empty body leaves v as it is. The error is always a *apiv1.Problem: 413 for a
// body over the cap, 415 for another Content-Type, 400 for malformed JSON,
// 422 for a well-formed body of the wrong shape or with text PostgreSQL
// cannot store (see textErrors).
func readJSON(r *http.Request, v any, optional bool) error {
	body, err := readBody(r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(bytes.TrimPrefix(body, utf8BOM))) == 0 {
		if optional {
			return nil
		}
		return fieldProblem(http.StatusUnprocessableEntity, "body", "a JSON body is required")
	}
	if mt, err := mediaType(r); err != nil || mt != contentJSON {
		return unsupported(r, contentJSON)
	}
	return decodeJSON(body, v)
}

// utf8BOM is the UTF-8 byte order mark, which some editors and tools write
// at the start of a document; RFC 8259 section 8.1 lets a parser ignore it.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// decodeJSON strictly decodes one JSON value from body into v, translating
// errors to Problems (400 syntax, 422 shape or text). A leading UTF-8 byte
// order mark is ignored.
func decodeJSON(body []byte, v any) error {
	body = bytes.TrimPrefix(body, utf8BOM)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return problemf(http.StatusBadRequest, "malformed JSON: unexpected data after the top-level value")
	}
	// encoding/json keeps the last of two equal keys; a body that says two
	// things at once is refused instead. (Decode above has already refused
	// nesting deeper than encoding/json's limit, which bounds the recursion.)
	if path, _ := duplicateKey(json.NewDecoder(bytes.NewReader(body)), ""); path != "" {
		return fieldProblem(http.StatusUnprocessableEntity, path, "duplicate field")
	}
	// encoding/json turns invalid UTF-8 into U+FFFD without a word, and
	// PostgreSQL refuses NUL: both are refused with their paths.
	if errs := textErrors(body); len(errs) > 0 {
		return textProblem(errs)
	}
	return nil
}

// duplicateKey reads one JSON value from dec and returns the path of the
// first key that appears twice in one of its objects; "" when none does.
func duplicateKey(dec *json.Decoder, path string) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", err
			}
			k, _ := kt.(string)
			p := k
			if path != "" {
				p = path + "." + k
			}
			if seen[k] {
				return p, nil
			}
			seen[k] = true
			if dup, err := duplicateKey(dec, p); dup != "" || err != nil {
				return dup, err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if dup, err := duplicateKey(dec, fmt.Sprintf("%s[%d]", path, i)); dup != "" || err != nil {
				return dup, err
			}
		}
	default:
		return "", nil
	}
	_, err = dec.Token() // the closing delimiter
	return "", err
}

// decodeProblem translates an encoding/json error to a Problem.
func decodeProblem(err error) *apiv1.Problem {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		path := te.Field
		if path == "" {
			path = "body"
		}
		return fieldProblem(http.StatusUnprocessableEntity, path, "must be %s, not %s", jsonKind(te.Type.Kind().String()), te.Value)
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name := strings.Trim(field, `"`)
		return fieldProblem(http.StatusUnprocessableEntity, name, "unknown field")
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok || errors.Is(err, io.ErrUnexpectedEOF) {
		return problemf(http.StatusBadRequest, "malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return problemf(http.StatusBadRequest, "malformed JSON body")
}

// jsonKind names a Go kind the way a JSON client thinks of it.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		return "an integer"
	case "float32", "float64":
		return "a number"
	case "map", "struct":
		return "an object"
	case "slice", "array":
		return "an array"
	}
	return kind
}
