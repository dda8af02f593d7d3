package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

// checkMessage refuses a message over apiv1.MaxMessageLen characters, or
// one that holds a NUL character or invalid UTF-8 (see textFault).
func checkMessage(msg string) error {
	if fault := textFault(msg); fault != "" {
		return fieldProblem(http.StatusUnprocessableEntity, "message", "%s", fault)
	}
	if utf8.RuneCountInString(msg) > apiv1.MaxMessageLen {
		return fieldProblem(http.StatusUnprocessableEntity, "message", "must be at most %d characters", apiv1.MaxMessageLen)
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
	env, err := readEnvelope(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	note(r, "message", env.Message)
	if err := checkMessage(env.Message); err != nil {
		s.writeError(w, r, err)
		return
	}
	if dryRun {
		s.dryRun(w, r, env.Spec)
		return
	}
	want, err := s.precondition(ctx, match)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p := db.PublishParams{
		Action:  apiv1.ActionCreate,
		Author:  actorFrom(ctx),
		Message: env.Message,
		IfMatch: want,
	}
	if hasStable(env.Spec) {
		s.publishAllocated(w, r, env.Spec, p)
		return
	}
	s.publish(w, r, env.Spec, p)
}

// hasStable reports whether spec has a split with allocation stable.
func hasStable(spec *config.Spec) bool {
	for i := range spec.Services {
		if spec.Services[i].Split.Stable() {
			return true
		}
	}
	return false
}

// publishAllocated is publish for a spec with stable splits: under the
// publish lock (db.Store.Edit), it computes every stable split's slot table
// from the active generation's (config.Allocate), so the table is always
// derived from the new generation's actual parent, then stores the result
// as publish does (p.IfMatch checked, an unchanged spec not stored again).
func (s *Server) publishAllocated(w http.ResponseWriter, r *http.Request, spec *config.Spec, p db.PublishParams) {
	var next *config.Spec
	g, err := s.store.Edit(r.Context(), func(cur apiv1.Generation) (db.PublishParams, error) {
		var parent *config.Spec
		if cur.ID > 0 {
			var err error
			if parent, err = decodeSpec(cur); err != nil {
				return db.PublishParams{}, err
			}
		}
		next = spec.Clone()
		config.Allocate(parent, next)
		body, err := encodeSpec(next)
		if err != nil {
			return db.PublishParams{}, err
		}
		p.Spec, p.CanaryKeys = body, config.CanaryKeys(next)
		return p, nil
	})
	if err != nil {
		s.publishError(w, r, err, p.IfMatch)
		return
	}
	s.created(w, r, g, next)
}

// readEnvelope reads the body of a publish, JSON or YAML by its
// Content-Type, with config's one decoder. The error is a *apiv1.Problem:
// 413 for a body over the cap, 415 for another Content-Type, 400 for a body
// that is not JSON or YAML at all, 422 listing every problem of a readable
// one.
func readEnvelope(r *http.Request) (config.Envelope, error) {
	body, err := readBody(r)
	if err != nil {
		return config.Envelope{}, err
	}
	format := config.FormatJSON
	mt, err := mediaType(r)
	switch {
	case len(bytes.TrimSpace(bytes.TrimPrefix(body, utf8BOM))) == 0:
		return config.Envelope{}, fieldProblem(http.StatusUnprocessableEntity, "body", "a JSON or YAML body is required")
	case err != nil:
		return config.Envelope{}, unsupported(r, append([]string{contentJSON}, yamlTypes...)...)
	case slices.Contains(yamlTypes, mt):
		format = config.FormatYAML
	case mt != contentJSON:
		return config.Envelope{}, unsupported(r, append([]string{contentJSON}, yamlTypes...)...)
	}
	if format == config.FormatJSON {
		// The JSON decoder would store invalid UTF-8 as U+FFFD without a
		// word; YAML's refuses it, and a NUL is caught on the decoded
		// values (checkMessage, the spec's validation).
		if errs := textErrors(bytes.TrimPrefix(body, utf8BOM)); len(errs) > 0 {
			for i, e := range errs {
				// The spec's own paths are relative to the spec.
				if rest, ok := strings.CutPrefix(e.Path, "spec."); ok {
					errs[i].Path = rest
				}
			}
			return config.Envelope{}, textProblem(errs)
		}
	}
	env, err := config.ParseEnvelope(body, format)
	if err != nil {
		return config.Envelope{}, specProblem(err)
	}
	return env, nil
}

// specProblem maps an error of the spec decoder to its Problem: 400 for a
// document that could not be read, 422 listing every problem of one that
// could.
func specProblem(err error) error {
	v, ok := errors.AsType[*config.ValidationError](err)
	if !ok {
		return fmt.Errorf("parse spec: %w", err)
	}
	if v.Malformed {
		p := problemf(http.StatusBadRequest, "the body is not well-formed")
		p.Errors = fieldErrors(v.Errors)
		return p
	}
	return validationProblem("the spec is invalid", v)
}

// publish stores spec (validated by the caller) with p, and answers 201
// with the new generation, or 200 with the active one when spec equals the
// active spec (nothing stored). p.Spec is filled in here.
func (s *Server) publish(w http.ResponseWriter, r *http.Request, spec *config.Spec, p db.PublishParams) {
	body, err := encodeSpec(spec)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	p.Spec, p.CanaryKeys = body, config.CanaryKeys(spec)
	g, err := s.store.Publish(r.Context(), p)
	if err != nil {
		s.publishError(w, r, err, p.IfMatch)
		return
	}
	s.created(w, r, g, spec)
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
	// The impact of the tables the publish would compute (config.Allocate
	// from the active generation's).
	spec = spec.Clone()
	config.Allocate(old, spec)
	s.writeJSON(w, r, http.StatusOK, apiv1.DryRunResult{Valid: true, Impact: diffSpecs(from, nil, old, spec)})
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

// created answers a publish: 201 with the new generation g (whose spec is
// spec), its Location and ETag, after handing it to Options.OnPublish; or,
// when g.Unchanged, 200 with the active generation and its ETag. Either way
// the generation is noted on the audit record. g.Spec is answered as it is:
// it must be encodeSpec's encoding of spec, the bytes the publish stored
// (db.Store.Publish and Edit return them), already in the schema's order,
// which is the order inSchemaOrder gives a stored spec.
func (s *Server) created(w http.ResponseWriter, r *http.Request, g apiv1.Generation, spec *config.Spec) {
	noteGeneration(r, g.ID)
	w.Header().Set("ETag", etag(g.ID))
	if g.Unchanged {
		if rec := auditFrom(r.Context()); rec != nil {
			rec.unchanged = true
		}
		s.writeJSON(w, r, http.StatusOK, g)
		return
	}
	if s.onPublish != nil {
		// Not the call's database deadline, which a publish that waited
		// for the publish lock may have all but used up.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.dbTimeout)
		defer cancel()
		if err := s.onPublish(ctx, g.ID, spec); err != nil {
			s.log.Error("apply published generation", "generation", g.ID, "request_id", requestID(r.Context()), "err", err)
		}
	}
	w.Header().Set("Location", "/api/v1/generations/"+strconv.FormatInt(g.ID, 10))
	s.writeJSON(w, r, http.StatusCreated, g)
}

// writeGeneration answers 200 with g and its ETag, or 304 when the client's
// If-None-Match still matches.
func (s *Server) writeGeneration(w http.ResponseWriter, r *http.Request, g apiv1.Generation) {
	tag := etag(g.ID)
	w.Header().Set("ETag", tag)
	if noneMatch(r, tag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	g, err := inSchemaOrder(g)
	if err != nil {
		s.internalError(w, r, err)
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
	page := apiv1.GenerationList{Items: gens}
	if len(gens) > limit {
		page.Items = gens[:limit]
		page.NextCursor = strconv.FormatInt(gens[limit-1].ID, 10)
	}
	if page.Items == nil {
		page.Items = []apiv1.Generation{}
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
func (s *Server) loadGeneration(r *http.Request) (apiv1.Generation, error) {
	id, err := pathID(r)
	if err != nil {
		return apiv1.Generation{}, err
	}
	return s.generation(r, id)
}

// generation loads generation id; a 404 Problem when it does not exist.
func (s *Server) generation(r *http.Request, id int64) (apiv1.Generation, error) {
	g, err := s.store.Get(r.Context(), id)
	if errors.Is(err, db.ErrNotFound) {
		return g, problemf(http.StatusNotFound, "generation %d does not exist", id)
	}
	return g, err
}

// rollback answers POST /api/v1/generations/{id}/rollback: a new generation
// whose spec is exactly the spec of {id}, slot tables of stable splits
// included (they are copied, not recomputed, so every key goes back to the
// branch it had in {id}).
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
	var req apiv1.MessageRequest
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
	spec, err := config.ParseAs(src.Spec, config.FormatJSON)
	if err != nil {
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
	s.publish(w, r, spec, db.PublishParams{
		Action:   apiv1.ActionRollback,
		SourceID: &id,
		Author:   actorFrom(ctx),
		Message:  req.Message,
		IfMatch:  want,
	})
}

// encodeSpec is the one encoding of a validated spec, which a publish
// stores and answers with: its fields in the schema's order (upstreams
// before services, name before endpoints, upstream before weight), and <,
// > and & unescaped, as in the answer around it. PostgreSQL keeps it as
// jsonb, which orders keys its own way; inSchemaOrder gives a spec read
// back this same encoding. A validated spec holds no string PostgreSQL
// cannot store (a NUL character): the data plane's validation refuses
// every one (TestValidationRefusesNUL).
func encodeSpec(spec *config.Spec) (json.RawMessage, error) {
	body, err := marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encode spec: %w", err)
	}
	return bytes.TrimSuffix(body, []byte("\n")), nil
}

// decodeSpec decodes a stored generation's spec. Stored specs were validated
// and normalized when published, so this is a plain decode.
func decodeSpec(g apiv1.Generation) (*config.Spec, error) {
	var spec config.Spec
	if err := json.Unmarshal(g.Spec, &spec); err != nil {
		return nil, fmt.Errorf("decode spec of generation %d: %w", g.ID, err)
	}
	return &spec, nil
}

// inSchemaOrder returns g, read from the database, with its spec
// re-encoded by encodeSpec, so that an answer lists the spec's fields in
// the schema's order (upstreams before services, name before endpoints,
// upstream before weight) rather than in the order PostgreSQL's jsonb keeps
// them (shortest key first), as the answer of its publish did. Stored specs
// are encoded config.Specs, so nothing but the order changes. A generation
// without a spec (a list item) is returned as it is.
func inSchemaOrder(g apiv1.Generation) (apiv1.Generation, error) {
	if len(g.Spec) == 0 {
		return g, nil
	}
	spec, err := decodeSpec(g)
	if err != nil {
		return g, err
	}
	if g.Spec, err = encodeSpec(spec); err != nil {
		return g, fmt.Errorf("generation %d: %w", g.ID, err)
	}
	return g, nil
}
