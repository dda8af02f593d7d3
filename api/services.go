package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

// editRetries is how many times a service edit without If-Match starts over
// from a fresh read when another publish got in first.
const editRetries = 3

// specEdit is one of the config edits, bound to its arguments.
type specEdit func(s *config.Spec, service string) (*config.Spec, error)

// flip answers POST /api/v1/services/{name}/flip.
func (s *Server) flip(w http.ResponseWriter, r *http.Request) {
	var req apiv1.MessageRequest
	if err := readJSON(r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.editService(w, r, apiv1.ActionFlip, req.Message, config.Flip)
}

// kill answers POST /api/v1/services/{name}/kill.
func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	var req apiv1.MessageRequest
	if err := readJSON(r, &req, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.editService(w, r, apiv1.ActionKill, req.Message, config.Kill)
}

// setWeights answers PUT /api/v1/services/{name}/weights.
func (s *Server) setWeights(w http.ResponseWriter, r *http.Request) {
	var req apiv1.WeightsRequest
	if err := readJSON(r, &req, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	note(r, "weights", req.Weights)
	note(r, "allow_reshuffle", req.AllowReshuffle)
	if len(req.Weights) == 0 {
		s.writeError(w, r, fieldProblem(http.StatusUnprocessableEntity, "weights", "must name at least one target"))
		return
	}
	s.editService(w, r, apiv1.ActionWeights, req.Message, func(spec *config.Spec, service string) (*config.Spec, error) {
		return config.SetWeights(spec, service, req.Weights, req.AllowReshuffle)
	})
}

// editService applies edit to the service {name} of the active generation and
// publishes the result as a new generation with action. The publish is
// conditional on the generation that was read; when another publish got in
// first it starts over from a fresh read (up to editRetries times), unless the
// client pinned the generation with If-Match, which then fails with 412.
func (s *Server) editService(w http.ResponseWriter, r *http.Request, action, message string, edit specEdit) {
	ctx := r.Context()
	name := chi.URLParam(r, "name")
	note(r, "service", name)
	if message != "" {
		note(r, "message", message)
	}
	if err := checkMessage(message); err != nil {
		s.writeError(w, r, err)
		return
	}
	match, err := parseIfMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if message == "" {
		message = fmt.Sprintf("%s %s", action, name)
	}
	for attempt := 0; ; attempt++ {
		cur, err := s.store.Current(ctx)
		switch {
		case errors.Is(err, db.ErrNotFound) && match.any:
			s.writeProblem(w, r, problemf(http.StatusPreconditionFailed, "If-Match: * but there is no generation yet"))
			return
		case errors.Is(err, db.ErrNotFound) && match.set && match.id != 0:
			s.writeProblem(w, r, s.preconditionFailed(ctx, match.id))
			return
		case errors.Is(err, db.ErrNotFound):
			s.writeProblem(w, r, problemf(http.StatusNotFound, "service %q does not exist: no generation has been published yet", name))
			return
		case err != nil:
			s.internalError(w, r, err)
			return
		}
		if match.set && !match.any && match.id != cur.ID {
			note(r, "if_match", match.id)
			s.writeProblem(w, r, problemf(http.StatusPreconditionFailed,
				"If-Match asks for generation %d but the active generation is %d", match.id, cur.ID))
			return
		}
		spec, err := decodeSpec(cur)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		next, err := edit(spec, name)
		if err != nil {
			s.writeError(w, r, editProblem(err, name, cur.ID))
			return
		}
		body, err := json.Marshal(next)
		if err != nil {
			s.internalError(w, r, fmt.Errorf("encode spec: %w", err))
			return
		}
		g, err := s.store.Publish(ctx, db.PublishParams{
			Spec:    body,
			Action:  action,
			Author:  actorFrom(ctx),
			Message: message,
			IfMatch: &cur.ID,
		})
		switch {
		case err == nil:
			s.created(w, r, g, next)
			return
		case !errors.Is(err, db.ErrPreconditionFailed):
			s.internalError(w, r, err)
			return
		case match.set:
			s.writeProblem(w, r, s.preconditionFailed(ctx, cur.ID))
			return
		case attempt >= editRetries:
			s.writeProblem(w, r, problemf(http.StatusConflict,
				"the active generation kept changing under concurrent publishes (%d attempts); retry", attempt+1))
			return
		}
		s.log.DebugContext(ctx, "service edit lost a publish race; retrying",
			"request_id", requestID(ctx), "service", name, "read_generation", cur.ID, "attempt", attempt+1)
	}
}

// editProblem maps a config edit error to its Problem: 404 unknown service,
// 409 no (2-target) split, 422 invalid result.
func editProblem(err error, service string, generation int64) error {
	if v, ok := errors.AsType[*config.ValidationError](err); ok {
		return validationProblem("the edit is refused", v)
	}
	switch {
	case errors.Is(err, config.ErrServiceNotFound):
		return problemf(http.StatusNotFound, "service %q does not exist in generation %d", service, generation)
	case errors.Is(err, config.ErrNotTwoTargetSplit):
		return problemf(http.StatusConflict, "service %q does not have a 2-target split to flip", service)
	case errors.Is(err, config.ErrNoSplit):
		return problemf(http.StatusConflict, "service %q routes to a single upstream; it has no split", service)
	}
	return err
}
