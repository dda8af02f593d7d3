package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

// auditTimeout bounds the write of one audit entry.
const auditTimeout = 5 * time.Second

// auditRecord collects what a mutating call's audit entry will say. It
// belongs to one request goroutine.
type auditRecord struct {
	action       string
	actor        string
	generationID *int64
	detail       map[string]any
	problem      *apiv1.Problem // the problem answered, if any
	skip         bool           // a dry run: nothing changed, nothing to audit
	unchanged    bool           // valid, but equal to the active spec: nothing stored
}

// auditFrom returns the audit record of a mutating call; nil for reads.
func auditFrom(ctx context.Context) *auditRecord {
	rec, _ := ctx.Value(auditKey).(*auditRecord)
	return rec
}

// note adds key=value to the audit detail of the request's mutating call; a
// no-op for reads.
func note(r *http.Request, key string, value any) {
	if rec := auditFrom(r.Context()); rec != nil {
		rec.detail[key] = value
	}
}

// noteGeneration notes the generation a mutating call published (or, for an
// unchanged call, found active).
func noteGeneration(r *http.Request, id int64) {
	if rec := auditFrom(r.Context()); rec != nil {
		rec.generationID = &id
	}
}

// bufferedWriter holds a mutating call's answer until its audit entry is
// written, so a client that reads the answer can already read the entry.
type bufferedWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (w *bufferedWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *bufferedWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.body.Write(b)
}

func (w *bufferedWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// audited wraps a mutating handler: whatever happens below it (refused by
// auth, by a body or media-type check, by validation, or accepted), the call
// is written to the audit log with its action, actor, outcome and status
// before the answer goes out. A failed audit write is logged; it never turns
// the answer into an error.
func (s *Server) audited(action string, next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := &auditRecord{action: action, actor: actorAnonymous, detail: map[string]any{}}
		bw := &bufferedWriter{ResponseWriter: w}
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), auditKey, rec)))
		if !rec.skip {
			s.recordAudit(r, rec, bw.status())
		}
		w.WriteHeader(bw.status())
		if _, err := w.Write(bw.body.Bytes()); err != nil {
			s.log.DebugContext(r.Context(), "write response", "request_id", requestID(r.Context()), "err", err)
		}
	}
}

// recordAudit writes rec as an audit entry for a call answered with status.
func (s *Server) recordAudit(r *http.Request, rec *auditRecord, status int) {
	outcome := apiv1.OutcomeAccepted
	switch {
	case status >= 400:
		outcome = apiv1.OutcomeRefused
	case rec.unchanged:
		outcome = apiv1.OutcomeUnchanged
	}
	if p := rec.problem; p != nil {
		rec.detail["problem"] = p.Title
		if p.Detail != "" {
			rec.detail["reason"] = p.Detail
		}
		if len(p.Errors) > 0 {
			rec.detail["errors"] = p.Errors
		}
	}
	detail, err := json.Marshal(rec.detail)
	if err != nil {
		detail = []byte(`{}`)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
	defer cancel()
	_, err = s.store.RecordAudit(ctx, apiv1.AuditEntry{
		Actor:        rec.actor,
		Action:       rec.action,
		Outcome:      outcome,
		Status:       status,
		GenerationID: rec.generationID,
		RequestID:    requestID(r.Context()),
		RemoteAddr:   r.RemoteAddr,
		Detail:       detail,
	})
	if err != nil {
		s.log.ErrorContext(r.Context(), "record audit entry", "request_id", requestID(r.Context()),
			"action", rec.action, "outcome", outcome, "status", status, "err", err)
	}
}

// listAudit answers GET /api/v1/audit.
func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	limit, before, err := parsePage(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	entries, err := s.store.ListAudit(r.Context(), limit+1, before)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	page := apiv1.AuditList{Items: entries}
	if len(entries) > limit {
		page.Items = entries[:limit]
		page.NextCursor = strconv.FormatInt(entries[limit-1].ID, 10)
	}
	if page.Items == nil {
		page.Items = []apiv1.AuditEntry{}
	}
	s.writeJSON(w, r, http.StatusOK, page)
}
