package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/config"
)

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
// publishes the result as a new generation with action. The edit runs under
// the publish lock (db.Store.Edit), on the generation that is still the
// newest when the result is stored, so concurrent edits serialise: none is
// lost and none fails for another's sake. An If-Match that names another
// generation than the active one fails with 412.
func (s *Server) editService(w http.ResponseWriter, r *http.Request, action, message string, edit specEdit) {
	ctx := r.Context()
	name, err := serviceName(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
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
	var next *config.Spec
	g, err := s.store.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
		if err := matchActive(r, match, cur.ID, name); err != nil {
			return db.PublishParams{}, err
		}
		spec, err := decodeSpec(cur)
		if err != nil {
			return db.PublishParams{}, err
		}
		edited, err := edit(spec, name)
		if err != nil {
			return db.PublishParams{}, editProblem(err, name, cur.ID)
		}
		body, err := encodeSpec(edited)
		if err != nil {
			return db.PublishParams{}, err
		}
		next = edited
		return db.PublishParams{Spec: body, Action: action, Author: actorFrom(ctx), Message: message,
			CanaryKeys: config.CanaryKeys(edited)}, nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.created(w, r, g, next)
}

// matchActive checks the If-Match of an edit of service against the active
// generation (0: none yet): a 412 Problem when it names another, a 404
// Problem when there is no generation to edit.
func matchActive(r *http.Request, match ifMatch, active int64, service string) error {
	switch {
	case active == 0 && match.any:
		return problemf(http.StatusPreconditionFailed, "If-Match: * but there is no generation yet")
	case active == 0 && match.set && match.id != 0:
		note(r, "if_match", match.id)
		return problemf(http.StatusPreconditionFailed, "If-Match asks for generation %d but there is no generation yet", match.id)
	case active == 0:
		return noGenerationYet(service)
	case match.set && !match.any && match.id != active:
		note(r, "if_match", match.id)
		return problemf(http.StatusPreconditionFailed,
			"If-Match asks for generation %d but the active generation is %d", match.id, active)
	}
	return nil
}

// editProblem maps a config edit error to its Problem: 404 unknown service,
// 409 no (2-target) split, 422 invalid result.
func editProblem(err error, service string, generation int64) error {
	if v, ok := errors.AsType[*config.ValidationError](err); ok {
		return validationProblem("the edit is refused", v)
	}
	switch {
	case errors.Is(err, config.ErrServiceNotFound):
		near := ""
		if nf, ok := errors.AsType[*config.ServiceNotFoundError](err); ok {
			near = nf.Near
		}
		return unknownService(service, near, generation)
	case errors.Is(err, config.ErrNotTwoTargetSplit):
		return problemf(http.StatusConflict, "service %q does not have a 2-target split to flip", service)
	case errors.Is(err, config.ErrNoSplit):
		return problemf(http.StatusConflict, "service %q routes to a single upstream; it has no split", service)
	}
	return err
}

// unknownService is the 404 Problem of a call on a service that generation
// does not have, with the nearest service it has (near, "" for none).
func unknownService(service, near string, generation int64) *apiv1.Problem {
	detail := fmt.Sprintf("service %q does not exist in generation %d", service, generation)
	if near != "" {
		detail += fmt.Sprintf("; did you mean %q?", near)
	}
	return problemf(http.StatusNotFound, "%s", detail)
}
