package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
	"github.com/dwara/dwara/gateway/config"
)

// Audit actions of an operator's hold of a canary group; a hold publishes
// no generation, so these are audit actions only.
const (
	actionCanaryPause  = "canary_pause"
	actionCanaryResume = "canary_resume"
	actionCanaryGate   = "canary_promote"
)

// listCanary answers GET /api/v1/canary: every canary group of the active
// generation, in spec order, with its weights in force, its state and the
// fleet's figures over its window. No generation yet is an empty list.
func (s *Server) listCanary(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	list := apiv1.CanaryList{Items: []apiv1.CanaryGroup{}}
	cur, err := s.store.Current(ctx)
	if errors.Is(err, db.ErrNotFound) {
		s.writeJSON(w, r, http.StatusOK, list)
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	spec, err := decodeSpec(cur)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	groups := canary.Groups(spec)
	if len(groups) == 0 {
		s.writeJSON(w, r, http.StatusOK, list)
		return
	}
	states, err := s.store.CanaryStates(ctx, cur.ID)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	for _, g := range groups {
		item, err := s.canaryGroup(ctx, cur.ID, g, states[g.Service])
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		list.Items = append(list.Items, item)
	}
	s.writeJSON(w, r, http.StatusOK, list)
}

// listCanaryEvents answers GET /api/v1/canary/events: one page of canary
// events, newest first, optionally of one service and one generation.
func (s *Server) listCanaryEvents(w http.ResponseWriter, r *http.Request) {
	limit, before, err := parsePage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	if fault := textFault(q.Get("service")); fault != "" {
		s.writeError(w, r, fieldProblem(http.StatusBadRequest, "service", "%s", fault))
		return
	}
	var generation int64
	if v := q.Get("generation"); v != "" || q.Has("generation") {
		if generation, err = parseID("generation", v); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	events, err := s.store.ListCanaryEvents(r.Context(), q.Get("service"), generation, limit+1, before)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	page := apiv1.CanaryEventList{Items: events}
	if len(events) > limit {
		page.Items = events[:limit]
		page.NextCursor = strconv.FormatInt(events[limit-1].ID, 10)
	}
	if page.Items == nil {
		page.Items = []apiv1.CanaryEvent{}
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// serviceMessage reads what a call on service {name} with an optional
// {"message"} body asks, noting both for the audit: the service name, and
// the body with its message checked.
func serviceMessage(r *http.Request) (string, apiv1.MessageRequest, error) {
	var req apiv1.MessageRequest
	name, err := serviceName(r)
	if err != nil {
		return "", req, err
	}
	note(r, "service", name)
	if err := readJSON(r, &req, true); err != nil {
		return "", req, err
	}
	if req.Message != "" {
		note(r, "message", req.Message)
	}
	return name, req, checkMessage(req.Message)
}

// adoptCanary answers POST /api/v1/services/{name}/canary/adopt: the
// canary weights the controller set in the active generation become the
// configured weights of a new generation (action adopt). It publishes
// conditionally on the generation it read (the transient weights belong
// to it) and starts over from a fresh read, after a jittered backoff, when
// another publish got in first (see backoff), unless the client pinned
// the generation with If-Match, which then fails with 412.
func (s *Server) adoptCanary(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name, req, err := serviceMessage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	match, err := parseIfMatch(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		cur, err := s.store.Current(ctx)
		switch {
		case errors.Is(err, db.ErrNotFound):
			cur = apiv1.Generation{}
		case err != nil:
			s.internalError(w, r, err)
			return
		}
		if err := matchActive(r, match, cur.ID, name); err != nil {
			s.writeError(w, r, err)
			return
		}
		spec, err := decodeSpec(cur)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		g, err := groupOf(spec, name, cur.ID)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		states, err := s.store.CanaryStates(ctx, cur.ID)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		st := states[name]
		if !st.Transient {
			s.writeProblem(w, r, problemf(http.StatusConflict,
				"no transient weights to adopt: the canary controller has not changed the weights of service %q in generation %d",
				name, cur.ID))
			return
		}
		if st.Weight == g.Configured {
			s.writeProblem(w, r, problemf(http.StatusConflict,
				"no transient weights to adopt: the weights in force of service %q are the configured %s of generation %d",
				name, ratio(g.Weights(g.Configured)), cur.ID))
			return
		}
		ws := g.Weights(st.Weight)
		note(r, "weights", map[string]int{g.Baseline: ws[0], g.Canary: ws[1]})
		var next *config.Spec
		if g.Kind == apiv1.CanaryKindModel {
			next, err = config.SetModelGroupWeights(spec, name, ws[0], ws[1])
		} else {
			next, err = config.SetWeights(spec, name, map[string]int{g.Baseline: ws[0], g.Canary: ws[1]}, false)
		}
		if err != nil {
			s.writeError(w, r, editProblem(err, name, cur.ID))
			return
		}
		body, err := encodeSpec(next)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		message := req.Message
		if message == "" {
			message = fmt.Sprintf("adopt canary weights %s of %s", ratio(ws), name)
		}
		gen, err := s.store.Publish(ctx, db.PublishParams{
			Spec:       body,
			CanaryKeys: config.CanaryKeys(next),
			Action:     apiv1.ActionAdopt,
			Author:     actorFrom(ctx),
			Message:    message,
			IfMatch:    &cur.ID,
		})
		switch {
		case err == nil:
			s.created(w, r, gen, next)
			return
		case !errors.Is(err, db.ErrPreconditionFailed):
			s.internalError(w, r, err)
			return
		case match.set:
			s.writeProblem(w, r, s.preconditionFailed(ctx, cur.ID))
			return
		case !backoff(ctx, start, attempt):
			s.writeProblem(w, r, problemf(http.StatusConflict,
				"the active generation kept changing under concurrent publishes (%d attempts in %s); retry",
				attempt+1, time.Since(start).Round(time.Millisecond)))
			return
		}
		s.log.DebugContext(ctx, "canary adopt lost a publish race; retrying",
			"request_id", requestID(ctx), "service", name, "read_generation", cur.ID, "attempt", attempt+1)
	}
}

// pauseCanary answers POST /api/v1/services/{name}/canary/pause.
func (s *Server) pauseCanary(w http.ResponseWriter, r *http.Request) {
	s.holdCanary(w, r, true)
}

// resumeCanary answers POST /api/v1/services/{name}/canary/resume.
func (s *Server) resumeCanary(w http.ResponseWriter, r *http.Request) {
	s.holdCanary(w, r, false)
}

// holdCanary records an operator's pause (pause true) or resume of the
// canary group {name} of the active generation, at the weight in force, and
// answers 200 with the group as it is afterwards. A group already in the
// asked state is answered the same way, with nothing recorded (the audit
// outcome is then unchanged). A publish between the read and the record
// starts the call over once; a second one is a 409.
func (s *Server) holdCanary(w http.ResponseWriter, r *http.Request, pause bool) {
	ctx := r.Context()
	name, req, err := serviceMessage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	reason := req.Message
	if reason == "" {
		verb := "resume"
		if pause {
			verb = "pause"
		}
		reason = fmt.Sprintf("%s canary of %s", verb, name)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		cur, g, err := s.activeGroup(ctx, name)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		states, err := s.store.CanaryStates(ctx, cur.ID)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		weight := weightInForce(g, states[name])
		_, err = s.store.HoldCanary(ctx, cur.ID, name, pause, weight, actorFrom(ctx), reason)
		switch {
		case errors.Is(err, db.ErrPreconditionFailed) && backoff(ctx, start, attempt):
			s.log.DebugContext(ctx, "canary hold lost a publish race; retrying",
				"request_id", requestID(ctx), "service", name, "read_generation", cur.ID, "attempt", attempt+1)
			continue
		case errors.Is(err, db.ErrPreconditionFailed):
			s.writeProblem(w, r, problemf(http.StatusConflict,
				"the active generation kept changing under concurrent publishes (%d attempts in %s); retry",
				attempt+1, time.Since(start).Round(time.Millisecond)))
			return
		case errors.Is(err, db.ErrUnchanged):
			if rec := auditFrom(ctx); rec != nil {
				rec.unchanged = true
			}
		case err != nil:
			s.internalError(w, r, err)
			return
		}
		noteGeneration(r, cur.ID)
		if states, err = s.store.CanaryStates(ctx, cur.ID); err != nil {
			s.internalError(w, r, err)
			return
		}
		item, err := s.canaryGroup(ctx, cur.ID, g, states[name])
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, item)
		return
	}
}

// activeGroup returns the active generation and its canary group of
// service; the error is a 404 Problem when there is no generation or no
// promoteCanary answers POST /api/v1/services/{name}/canary/promote: an
// operator passes the gate that waits at the canary weight in force, and
// the canary takes the step up (recorded as a promote with the caller as
// actor); 200 with the group's state. 409 when no gate waits (the schedule
// has no gate, or its hold has not passed yet, or a rollback moved it).
func (s *Server) promoteCanary(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	name, req, err := serviceMessage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cur, g, err := s.activeGroup(ctx, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	noteGeneration(r, cur.ID)
	states, err := s.store.CanaryStates(ctx, cur.ID)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	st := states[name]
	from := weightInForce(g, st)
	if !st.Gate {
		s.writeProblem(w, r, problemf(http.StatusConflict,
			"no gate waits for service %q: its canary is at weight %d of %d (%s); a gate waits once a step that canary_analysis.gate holds has passed its hold",
			name, from, g.Total, canaryState(g, st, from)))
		return
	}
	to := g.Above(from)
	actor := actorFrom(ctx)
	reason := fmt.Sprintf("gate passed by %s: step %d -> %d", actor, from, to)
	if req.Message != "" {
		reason += ": " + req.Message
	}
	_, err = s.store.PassCanaryGate(ctx, cur.ID, name, from, to, g.Configured, actor, reason)
	switch {
	case errors.Is(err, db.ErrNoGate), errors.Is(err, db.ErrPreconditionFailed):
		s.writeProblem(w, r, problemf(http.StatusConflict,
			"the gate of service %q is no longer waiting (the controller moved the canary, or a publish started it afresh); read GET /api/v1/canary and retry", name))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	if states, err = s.store.CanaryStates(ctx, cur.ID); err != nil {
		s.internalError(w, r, err)
		return
	}
	item, err := s.canaryGroup(ctx, cur.ID, g, states[name])
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, item)
}

// such service, a 409 Problem when the service has no canary analysis.
func (s *Server) activeGroup(ctx context.Context, service string) (apiv1.Generation, canary.Group, error) {
	cur, err := s.store.Current(ctx)
	if errors.Is(err, db.ErrNotFound) {
		return apiv1.Generation{}, canary.Group{}, noGenerationYet(service)
	}
	if err != nil {
		return apiv1.Generation{}, canary.Group{}, err
	}
	spec, err := decodeSpec(cur)
	if err != nil {
		return apiv1.Generation{}, canary.Group{}, err
	}
	g, err := groupOf(spec, service, cur.ID)
	return cur, g, err
}

// noGenerationYet is the 404 Problem of a call on service before the first
// publish.
func noGenerationYet(service string) *apiv1.Problem {
	return problemf(http.StatusNotFound, "service %q does not exist: no generation has been published yet", service)
}

// groupOf returns the canary group of service in spec (the spec of
// generation); the error is a 404 Problem when spec has no such service, a
// 409 Problem when the service has no canary analysis.
//
// service may name a model group, "<service>/<alias>" (the path's {name}
// with its slash escaped as %2F).
func groupOf(spec *config.Spec, service string, generation int64) (canary.Group, error) {
	svcName, alias, isModel := strings.Cut(service, "/")
	svc, _ := spec.Service(svcName)
	if svc == nil {
		return canary.Group{}, unknownService(svcName, spec.NearestService(svcName), generation)
	}
	for _, g := range canary.Groups(spec) {
		if g.Service == service {
			return g, nil
		}
	}
	if isModel {
		for _, a := range svc.Models {
			if a.Alias == alias {
				return canary.Group{}, problemf(http.StatusConflict,
					"model alias %q of service %q has no canary analysis in generation %d: it needs canary_analysis and exactly 2 targets", alias, svcName, generation)
			}
		}
		return canary.Group{}, problemf(http.StatusNotFound,
			"service %q has no model alias %q in generation %d", svcName, alias, generation)
	}
	if svc.Split == nil {
		return canary.Group{}, problemf(http.StatusConflict,
			"service %q routes to a single upstream in generation %d; it has no split and no canary analysis", service, generation)
	}
	return canary.Group{}, problemf(http.StatusConflict,
		"service %q has no canary analysis in generation %d: its split has no canary_analysis", service, generation)
}

// weightInForce is the canary weight of g in force: the controller's
// transient weight when it changed it in this generation, else the
// configured one.
func weightInForce(g canary.Group, st db.CanaryState) int {
	if st.Transient {
		return st.Weight
	}
	return g.Configured
}

// canaryState is the apiv1 state of g with the canary at weight.
func canaryState(g canary.Group, st db.CanaryState, weight int) string {
	switch {
	case !g.Analysis.Enabled:
		return apiv1.CanaryDisabled
	case g.ManagedBy != "":
		return apiv1.CanaryManaged
	case st.Paused:
		return apiv1.CanaryPaused
	case weight == g.Total:
		return apiv1.CanaryComplete
	case weight == 0:
		// Rolled back by the controller, or configured at 0 (adopted
		// after a rollback, or parked): either way nothing is judged.
		return apiv1.CanaryRolledBack
	}
	return apiv1.CanaryRunning
}

// canaryGroup builds the wire state of g in generation from what storage
// knows of it (st) and the fleet's figures over its window.
func (s *Server) canaryGroup(ctx context.Context, generation int64, g canary.Group, st db.CanaryState) (apiv1.CanaryGroup, error) {
	window := time.Duration(g.Analysis.WindowSeconds) * time.Second
	base, can, _, err := s.store.CanaryWindow(ctx, generation, g.Service, window)
	if err != nil {
		return apiv1.CanaryGroup{}, err
	}
	baseFig, err := figures(base)
	if err != nil {
		return apiv1.CanaryGroup{}, fmt.Errorf("baseline window of %q in generation %d: %w", g.Service, generation, err)
	}
	canFig, err := figures(can)
	if err != nil {
		return apiv1.CanaryGroup{}, fmt.Errorf("canary window of %q in generation %d: %w", g.Service, generation, err)
	}
	weight := weightInForce(g, st)
	var holdSince *time.Time
	var holdLeft *float64
	if !st.HoldSince.IsZero() {
		holdSince = &st.HoldSince
		hold := time.Duration(g.Analysis.HoldSeconds) * time.Second
		left := max(0, hold-time.Since(st.HoldSince)).Seconds()
		holdLeft = &left
	}
	gate := g.Analysis.Gate
	if gate == "" {
		gate = config.GateAuto
	}
	next := g.Above(weight)
	return apiv1.CanaryGroup{
		Service:         g.Service,
		Kind:            g.Kind,
		GenerationID:    generation,
		Baseline:        g.Baseline,
		Canary:          g.Canary,
		Configured:      g.Weights(g.Configured),
		Weights:         g.Weights(weight),
		Transient:       st.Transient,
		State:           canaryState(g, st, weight),
		WindowSeconds:   g.Analysis.WindowSeconds,
		BaselineWindow:  baseFig,
		CanaryWindow:    canFig,
		PValue:          canary.PValue(uint64(canFig.Errors), uint64(canFig.Requests), uint64(baseFig.Errors), uint64(baseFig.Requests)),
		LastEvent:       st.LastEvent,
		HoldSince:       holdSince,
		GateWaiting:     st.Gate,
		HoldSeconds:     g.Analysis.HoldSeconds,
		HoldLeftSeconds: holdLeft,
		Gate:            gate,
		NextWeight:      next,
		NextGated:       next != weight && g.Gated(next),
		Schedule:        schedule(g, weight),
		ManagedBy:       g.ManagedBy,
	}, nil
}

// schedule is the wire schedule of g with the canary at weight; nil when
// g has no steps.
func schedule(g canary.Group, weight int) *apiv1.CanarySchedule {
	if len(g.Analysis.Steps) == 0 {
		return nil
	}
	sc := &apiv1.CanarySchedule{Steps: g.Analysis.Steps, Weights: make([]int, len(g.Analysis.Steps)), Step: -1}
	for i, pc := range g.Analysis.Steps {
		sc.Weights[i] = config.StepWeight(g.Total, pc)
		if sc.Weights[i] <= weight {
			sc.Step = i
		}
	}
	return sc
}

// figures turns the stored totals of one version into the figures the
// controller judges.
func figures(t db.CanaryTotals) (apiv1.CanaryFigures, error) {
	st := canary.Stats{Requests: t.Requests, Errors: t.Errors}
	if err := st.AddSparse(t.Latency); err != nil {
		return apiv1.CanaryFigures{}, err
	}
	return st.Figures(), nil
}

// ratio formats a group's weights as "baseline/canary", e.g. "85/15".
func ratio(ws [2]int) string {
	return strconv.Itoa(ws[0]) + "/" + strconv.Itoa(ws[1])
}
