package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// Page sizes of the list endpoints.
const (
	defaultLimit = 50
	maxLimit     = 500
)

// parsePage reads ?limit= (1..500, default 50) and ?cursor= (the id of the
// last item of the previous page; 0 when absent). Bad values are a 400
// Problem naming the parameter.
func parsePage(r *http.Request) (limit int, before int64, err error) {
	q := r.URL.Query()
	limit = defaultLimit
	if v := q.Get("limit"); v != "" || q.Has("limit") {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return 0, 0, fieldProblem(http.StatusBadRequest, "limit", "must be an integer from 1 to %d", maxLimit)
		}
		limit = n
	}
	if v := q.Get("cursor"); v != "" || q.Has("cursor") {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return 0, 0, fieldProblem(http.StatusBadRequest, "cursor", "must be the next_cursor of a previous page")
		}
		before = n
	}
	return limit, before, nil
}

// parseID reads a generation id from the path parameter or query parameter
// name; a value that is not a positive integer is a 400 Problem.
func parseID(name, v string) (int64, error) {
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, fieldProblem(http.StatusBadRequest, name, "must be a generation id (a positive integer), not %q", v)
	}
	return id, nil
}

// pathID reads the {id} path parameter.
func pathID(r *http.Request) (int64, error) {
	return parseID("id", chi.URLParam(r, "id"))
}

// parseBool reads an optional boolean query parameter (true/false/1/0).
func parseBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fieldProblem(http.StatusBadRequest, name, "must be true or false")
	}
	return b, nil
}

// ifMatch is a parsed If-Match header.
type ifMatch struct {
	set bool  // the header was sent
	any bool  // "*": any existing generation
	id  int64 // otherwise the id the active generation must have (0: none)
}

// parseIfMatch reads If-Match: `"<id>"` (or a bare id) or `*`. Anything else
// is a 400 Problem.
func parseIfMatch(r *http.Request) (ifMatch, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return ifMatch{}, nil
	}
	if v == "*" {
		return ifMatch{set: true, any: true}, nil
	}
	id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`), 10, 64)
	if err != nil || id < 0 {
		return ifMatch{}, fieldProblem(http.StatusBadRequest, "If-Match", `must be "<generation id>" or *`)
	}
	return ifMatch{set: true, id: id}, nil
}

// precondition turns the If-Match header into PublishParams.IfMatch: nil
// when no header (or `*` with a generation present), else the required id.
// `*` with no generation yet is a 412 Problem.
func (s *Server) precondition(ctx context.Context, m ifMatch) (*int64, error) {
	switch {
	case !m.set:
		return nil, nil
	case m.any:
		// Generations are never deleted: once one exists, `*` holds for good.
		if id, err := s.store.NewestID(ctx); err != nil {
			return nil, err
		} else if id == 0 {
			return nil, problemf(http.StatusPreconditionFailed, "If-Match: * but there is no generation yet")
		}
		return nil, nil
	default:
		id := m.id
		return &id, nil
	}
}

// preconditionFailed builds the 412 Problem for an If-Match of want, naming
// the active generation when it can be read.
func (s *Server) preconditionFailed(ctx context.Context, want int64) *apiv1.Problem {
	active := "the active generation differs"
	id, err := s.store.NewestID(ctx)
	switch {
	case err != nil:
	case id == 0:
		active = "there is no generation yet"
	default:
		active = "the active generation is " + strconv.FormatInt(id, 10)
	}
	return problemf(http.StatusPreconditionFailed, "If-Match asks for generation %d but %s", want, active)
}

// serviceName reads the {name} path parameter: a 400 Problem naming it when
// it holds a NUL character or bytes that are not UTF-8 (no service can
// have such a name, and no such text can be stored).
//
// chi gives the segment as sent when the path has escapes (it routes on
// the raw path), so the name is unescaped here: a model canary group
// "<service>/<alias>" comes as llm%2Fchat-prod.
func serviceName(r *http.Request) (string, error) {
	name := chi.URLParam(r, "name")
	if u, err := url.PathUnescape(name); err == nil {
		name = u
	} else {
		return "", fieldProblem(http.StatusBadRequest, "name", "is not a valid escaped path segment: %v", err)
	}
	if fault := textFault(name); fault != "" {
		return "", fieldProblem(http.StatusBadRequest, "name", "%s", fault)
	}
	return name, nil
}

// etag is the ETag of generation id.
func etag(id int64) string {
	return `"` + strconv.FormatInt(id, 10) + `"`
}

// noneMatch reports whether an If-None-Match header matches tag.
func noneMatch(r *http.Request, tag string) bool {
	v := r.Header.Get("If-None-Match")
	if v == "" {
		return false
	}
	for c := range strings.SplitSeq(v, ",") {
		c = strings.TrimPrefix(strings.TrimSpace(c), "W/")
		if c == "*" || c == tag {
			return true
		}
	}
	return false
}
