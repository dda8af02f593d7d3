package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

// maxMessageLen is the longest accepted change message, in characters.
const maxMessageLen = 1024

// CreateRequest is the body of POST /api/v1/generations, as JSON or YAML.
type CreateRequest struct {
	// Message says why; stored with the generation. Optional.
	Message string `json:"message,omitempty"`
	// Spec is the routing configuration, validated by config.Parse.
	Spec json.RawMessage `json:"spec"`
}

// MessageRequest is the optional body of rollback, flip and kill.
type MessageRequest struct {
	// Message says why; empty means a generated one.
	Message string `json:"message,omitempty"`
}

// DryRunResult answers POST /api/v1/generations?dry_run=true for a valid spec.
type DryRunResult struct {
	// Valid is always true (an invalid spec is a 422 problem).
	Valid bool `json:"valid"`
	// Impact compares the active generation with the proposed spec.
	Impact Diff `json:"impact"`
}

// GenerationList is one page of generations, newest first, without specs.
type GenerationList struct {
	Items []db.Generation `json:"items"`
	// NextCursor, when not empty, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// checkMessage refuses a message over maxMessageLen characters.
func checkMessage(msg string) error {
	if utf8.RuneCountInString(msg) > maxMessageLen {
		return fieldProblem(http.StatusUnprocessableEntity, "message", "must be at most %d characters", maxMessageLen)
	}
	return nil
}

// createGeneration answers POST /api/v1/generations.
func (s *Server) createGeneration(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	dryRun, err := parseBool(r, "dry_run")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if rec := auditFrom(ctx); rec != nil && dryRun {
		rec.skip = true
	}
	match, err := parseIfMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req CreateRequest
	if err := readJSONOrYAML(r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	note(r, "message", req.Message)
	if err := checkMessage(req.Message); err != nil {
		s.writeError(w, r, err)
		return
	}
	if len(req.Spec) == 0 || string(req.Spec) == "null" {
		s.writeError(w, r, fieldProblem(http.StatusUnprocessableEntity, "spec", "is required"))
		return
	}
	spec, err := config.Parse(req.Spec)
	if err != nil {
		s.writeError(w, r, specProblem(err))
		return
	}
	if dryRun {
		s.dryRun(w, r, spec)
		return
	}
	body, err := json.Marshal(spec)
	if err != nil {
		s.internalError(w, r, fmt.Errorf("encode spec: %w", err))
		return
	}
	want, err := s.precondition(ctx, match)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	g, err := s.store.Publish(ctx, db.PublishParams{
		Spec:    body,
		Action:  db.ActionCreate,
		Author:  actorFrom(ctx),
		Message: req.Message,
		IfMatch: want,
	})
	if err != nil {
		s.publishError(w, r, err, want)
		return
	}
	s.created(w, r, g)
}

// specProblem maps a config.Parse error to a 422 Problem.
func specProblem(err error) error {
	if v, ok := errors.AsType[*config.ValidationError](err); ok {
		return validationProblem("the spec is invalid", v)
	}
	return fmt.Errorf("parse spec: %w", err)
}

// dryRun answers a valid dry run with the impact of spec on the active
// generation.
func (s *Server) dryRun(w http.ResponseWriter, r *http.Request, spec *config.Spec) {
	var from *int64
	old := &config.Spec{}
	cur, err := s.store.Current(r.Context())
	switch {
	case errors.Is(err, db.ErrNotFound):
	case err != nil:
		s.internalError(w, r, err)
		return
	default:
		if old, err = decodeSpec(cur); err != nil {
			s.internalError(w, r, err)
			return
		}
		from = &cur.ID
	}
	s.writeJSON(w, r, http.StatusOK, DryRunResult{Valid: true, Impact: diffSpecs(from, nil, old, spec)})
}

// publishError answers a failed Publish: 412 when the precondition want
// failed, 404 when a source generation vanished, else 500.
func (s *Server) publishError(w http.ResponseWriter, r *http.Request, err error, want *int64) {
	switch {
	case errors.Is(err, db.ErrPreconditionFailed) && want != nil:
		note(r, "if_match", *want)
		s.writeProblem(w, r, s.preconditionFailed(r.Context(), *want))
	case errors.Is(err, db.ErrNotFound):
		s.writeProblem(w, r, problemf(http.StatusNotFound, "the source generation does not exist"))
	default:
		s.internalError(w, r, err)
	}
}

// created answers 201 with the new generation g, its Location and ETag, and
// notes it on the audit record.
func (s *Server) created(w http.ResponseWriter, r *http.Request, g db.Generation) {
	published(r, g.ID)
	if s.published != nil {
		if err := s.published(r.Context(), g); err != nil {
			s.log.Error("apply published generation", "generation", g.ID, "request_id", requestID(r.Context()), "err", err)
		}
	}
	w.Header().Set("Location", "/api/v1/generations/"+strconv.FormatInt(g.ID, 10))
	w.Header().Set("ETag", etag(g.ID))
	s.writeJSON(w, r, http.StatusCreated, g)
}

// writeGeneration answers 200 with g and its ETag, or 304 when the client's
// If-None-Match still matches.
func (s *Server) writeGeneration(w http.ResponseWriter, r *http.Request, g db.Generation) {
	tag := etag(g.ID)
	w.Header().Set("ETag", tag)
	if noneMatch(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.writeJSON(w, r, http.StatusOK, g)
}

// listGenerations answers GET /api/v1/generations.
func (s *Server) listGenerations(w http.ResponseWriter, r *http.Request) {
	limit, before, err := parsePage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	gens, err := s.store.List(r.Context(), limit+1, before)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	page := GenerationList{Items: gens}
	if len(gens) > limit {
		page.Items = gens[:limit]
		page.NextCursor = strconv.FormatInt(gens[limit-1].ID, 10)
	}
	if page.Items == nil {
		page.Items = []db.Generation{}
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// currentGeneration answers GET /api/v1/generations/current.
func (s *Server) currentGeneration(w http.ResponseWriter, r *http.Request) {
	g, err := s.store.Current(r.Context())
	if errors.Is(err, db.ErrNotFound) {
		s.writeProblem(w, r, problemf(http.StatusNotFound, "no generation has been published yet"))
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	s.writeGeneration(w, r, g)
}

// getGeneration answers GET /api/v1/generations/{id}.
func (s *Server) getGeneration(w http.ResponseWriter, r *http.Request) {
	g, err := s.loadGeneration(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeGeneration(w, r, g)
}

// loadGeneration loads the generation named by the {id} path parameter: a
// 400 Problem for a bad id, 404 when it does not exist.
func (s *Server) loadGeneration(r *http.Request) (db.Generation, error) {
	id, err := pathID(r)
	if err != nil {
		return db.Generation{}, err
	}
	return s.generation(r, id)
}

// generation loads generation id; a 404 Problem when it does not exist.
func (s *Server) generation(r *http.Request, id int64) (db.Generation, error) {
	g, err := s.store.Get(r.Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		return g, problemf(http.StatusNotFound, "generation %d does not exist", id)
	}
	return g, err
}

// rollback answers POST /api/v1/generations/{id}/rollback: a new generation
// whose spec is exactly the spec of {id}.
func (s *Server) rollback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := pathID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	note(r, "source_id", id)
	match, err := parseIfMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req MessageRequest
	if err := readJSON(r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := checkMessage(req.Message); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Message == "" {
		req.Message = fmt.Sprintf("rollback to generation %d", id)
	}
	note(r, "message", req.Message)
	src, err := s.generation(r, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The old spec must still compile with today's validation, or the data
	// plane would refuse what the API accepted.
	if _, err := config.Parse(src.Spec); err != nil {
		if v, ok := errors.AsType[*config.ValidationError](err); ok {
			s.writeProblem(w, r, validationProblem(fmt.Sprintf("the spec of generation %d no longer validates", id), v))
			return
		}
		s.internalError(w, r, err)
		return
	}
	want, err := s.precondition(ctx, match)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	g, err := s.store.Publish(ctx, db.PublishParams{
		Spec:     src.Spec,
		Action:   db.ActionRollback,
		SourceID: &id,
		Author:   actorFrom(ctx),
		Message:  req.Message,
		IfMatch:  want,
	})
	if err != nil {
		s.publishError(w, r, err, want)
		return
	}
	s.created(w, r, g)
}

// decodeSpec decodes a stored generation's spec. Stored specs were validated
// and normalized when published, so this is a plain decode.
func decodeSpec(g db.Generation) (*config.Spec, error) {
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		return nil, fmt.Errorf("decode spec of generation %d: %w", g.ID, err)
	}
	return &spec, nil
}
