package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"

	"github.com/go-chi/chi/v5"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/canary"
)

// This file is where the data-plane replicas in control-plane mode report
// to the API: each one's state (PUT /api/v1/gateways/{id}, on every apply
// and heartbeat) and its canary window aggregates (POST
// /api/v1/canary/windows, about every second). Both are guarded like
// mutations (the Host, the admin token, the cross-site and media-type
// checks) but are not audited: they arrive every few seconds from every
// replica and would flood the audit log.

// serviceNamePattern is the rule of a service name in a spec (the Name
// schema of openapi.yaml).
var serviceNamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// validGatewayID reports whether id is a gateway instance id: 1..200
// characters of [A-Za-z0-9._:-].
func validGatewayID(id string) bool {
	if len(id) == 0 || len(id) > apiv1.MaxGatewayIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// gatewayIDRule says what a gateway id must be.
var gatewayIDRule = fmt.Sprintf("must be 1..%d characters of [A-Za-z0-9._:-]", apiv1.MaxGatewayIDLen)

// invalid is the 422 Problem listing errs.
func invalid(detail string, errs []apiv1.FieldError) *apiv1.Problem {
	p := problemf(http.StatusUnprocessableEntity, "%s", detail)
	p.Errors = errs
	return p
}

// reportGateway answers PUT /api/v1/gateways/{id}: the replica {id}
// reports itself (the body's id must be the path's). Its last heartbeat is
// the server's time of the call, whatever the body says. Storing it
// announces generation_applied on the event stream when the applied
// generation changed. 204 on success.
func (s *Server) reportGateway(w http.ResponseWriter, r *http.Request) {
	var g apiv1.GatewayInstance
	if err := readJSON(r, &g, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if errs := checkGateway(chi.URLParam(r, "id"), g); len(errs) > 0 {
		s.writeProblem(w, r, invalid("the gateway report is invalid", errs))
		return
	}
	g.LastHeartbeat = s.now()
	if err := s.store.UpsertGateway(r.Context(), g); err != nil {
		s.internalError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkGateway returns the problems of the report g sent to the path id.
func checkGateway(pathID string, g apiv1.GatewayInstance) []apiv1.FieldError {
	var errs []apiv1.FieldError
	switch {
	case !validGatewayID(g.ID):
		errs = append(errs, apiv1.FieldError{Path: "id", Message: gatewayIDRule})
	case g.ID != pathID:
		errs = append(errs, apiv1.FieldError{Path: "id", Message: fmt.Sprintf("is %q but the path names gateway %q; they must be equal", g.ID, pathID)})
	}
	if g.AppliedGeneration < 0 {
		errs = append(errs, apiv1.FieldError{Path: "applied_generation", Message: "must be a generation id, or 0 for none"})
	}
	for i, e := range g.Endpoints {
		if e.InFlight < 0 {
			errs = append(errs, apiv1.FieldError{Path: fmt.Sprintf("endpoints[%d].in_flight", i), Message: "must not be negative"})
		}
	}
	return errs
}

// flushCanaryWindows answers POST /api/v1/canary/windows: the replica's
// canary window aggregates are stored as its figures of the current second
// (two flushes within one second add up). 204 on success.
func (s *Server) flushCanaryWindows(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var rep apiv1.CanaryWindowReport
	if err := readJSON(r, &rep, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	// encoding/json fills a [2]uint64 from an array of any length; the
	// pairs' lengths are read apart.
	var shape struct {
		Rows []rowShape `json:"rows"`
	}
	if err := json.Unmarshal(bytes.TrimPrefix(body, utf8BOM), &shape); err != nil {
		s.writeError(w, r, decodeProblem(err))
		return
	}
	rows, errs := canaryRows(rep, shape.Rows)
	if len(errs) > 0 {
		s.writeProblem(w, r, invalid("the canary window report is invalid", errs))
		return
	}
	if err := s.store.FlushCanaryWindows(r.Context(), rep.Instance, rows); err != nil {
		s.internalError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// rowShape is a canary window row's latency pairs as sent.
type rowShape struct {
	Latency [][]json.RawMessage `json:"latency"`
}

// canaryRows checks rep (whose rows' latency pairs, as sent, are shapes)
// and converts its rows to storage's.
func canaryRows(rep apiv1.CanaryWindowReport, shapes []rowShape) ([]db.CanaryWindowRow, []apiv1.FieldError) {
	var errs []apiv1.FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, apiv1.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if !validGatewayID(rep.Instance) {
		add("instance", "%s", gatewayIDRule)
	}
	if len(rep.Rows) > apiv1.MaxCanaryWindowRows {
		add("rows", "has %d rows; at most %d may be sent at once", len(rep.Rows), apiv1.MaxCanaryWindowRows)
		return nil, errs
	}
	type key struct {
		gen              int64
		service, version string
	}
	first := make(map[key]int, len(rep.Rows))
	rows := make([]db.CanaryWindowRow, 0, len(rep.Rows))
	for i, row := range rep.Rows {
		at := func(field string) string { return fmt.Sprintf("rows[%d].%s", i, field) }
		if row.GenerationID < 1 {
			add(at("generation_id"), "must be a generation id (a positive integer)")
		}
		if !serviceNamePattern.MatchString(row.Service) {
			add(at("service"), "must be a service name: 1..63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit")
		}
		if row.Version != db.VersionBaseline && row.Version != db.VersionCanary {
			add(at("version"), "must be %q or %q", db.VersionBaseline, db.VersionCanary)
		}
		if row.Requests > math.MaxInt64 {
			add(at("requests"), "must be at most %d", int64(math.MaxInt64))
		}
		if row.Errors > row.Requests {
			add(at("errors"), "must be at most requests (%d)", row.Requests)
		}
		k := key{row.GenerationID, row.Service, row.Version}
		if j, dup := first[k]; dup {
			add(fmt.Sprintf("rows[%d]", i), "repeats the generation, service and version of rows[%d]; send one row of each", j)
		} else {
			first[k] = i
		}
		for j, p := range row.Latency {
			pair := fmt.Sprintf("rows[%d].latency[%d]", i, j)
			if i < len(shapes) && j < len(shapes[i].Latency) && len(shapes[i].Latency[j]) != 2 {
				add(pair, "must be a [bucket, count] pair")
				continue
			}
			switch {
			case p[0] >= canary.SparseBuckets:
				add(pair, "bucket %d is out of range: buckets are 0..%d (latency 0..%d, then time to first token)", p[0], canary.SparseBuckets-1, canary.Buckets-1)
			case j > 0 && p[0] <= row.Latency[j-1][0]:
				add(pair, "bucket %d does not follow bucket %d: buckets must be strictly ascending", p[0], row.Latency[j-1][0])
			}
			if p[1] > math.MaxInt64 {
				add(pair, "count must be at most %d", int64(math.MaxInt64))
			}
		}
		rows = append(rows, db.CanaryWindowRow{
			Generation: row.GenerationID,
			Service:    row.Service,
			Version:    row.Version,
			Requests:   row.Requests,
			Errors:     row.Errors,
			Latency:    row.Latency,
		})
	}
	return rows, errs
}
