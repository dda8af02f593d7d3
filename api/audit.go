package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// auditRecord collects what a mutating call's audit entry will say. It
// belongs to one request goroutine.
type auditRecord struct {
	action          string
	actor           string
	clientRequestID string // the client's X-Request-Id, once authenticated
	generationID    *int64
	detail          map[string]any
	problem         *apiv1.Problem // the problem answered, if any
	skip            bool           // a dry run: nothing changed, nothing to audit
	unchanged       bool           // valid, but equal to the active spec: nothing stored
	unavailable     bool           // answered 503: the database did not answer
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
// the Host, auth, cross-site or media-type checks, by a body check, by
// validation, or accepted), the call is written to the audit log with its
// action, actor, outcome and status before the answer goes out. A failed
// audit write is logged; it never turns the answer into an error. A
// refusal from a remote address that is over its rate of refusals is
// answered 429 instead, and written nowhere but in a counter (see
// RefusalsDropped).
func (s *Server) audited(action string, next http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		actor := actorAnonymous
		if s.hasToken || s.hasReadToken {
			actor = actorUnauthenticated // until authenticate says otherwise
		}
		rec := &auditRecord{action: action, actor: actor, detail: map[string]any{}}
		bw := &bufferedWriter{ResponseWriter: w}
		next.ServeHTTP(bw, r.WithContext(context.WithValue(r.Context(), auditKey, rec)))
		if !rec.skip {
			if limited, wait := s.recordAudit(r, rec, bw.status()); limited {
				s.tooManyRefusals(w, r, wait)
				return
			}
		}
		w.WriteHeader(bw.status())
		if _, err := w.Write(bw.body.Bytes()); err != nil {
			s.log.DebugContext(r.Context(), "write response", "request_id", requestID(r.Context()), "err", err)
		}
	}
}

// tooManyRefusals replaces the answer of a refused call over its address's
// rate (whose headers the handler may have set) with a 429 problem.
func (s *Server) tooManyRefusals(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	h := w.Header()
	for k := range h {
		if k != apiv1.RequestIDHeader {
			delete(h, k)
		}
	}
	h.Set("Retry-After", retryAfter(wait))
	s.writeProblem(w, r, problemf(http.StatusTooManyRequests,
		"too many refused calls from %s; this one was refused too, and not recorded; retry in %s seconds",
		remoteKey(r.RemoteAddr), retryAfter(wait)))
}

// recordAudit writes rec as the audit entry of a call answered with
// status. A refusal counts against its remote address's rate: limited is
// true (and nothing is written) when the address is over it, with how long
// until it is not. A refusal identical to one of the last burstWindow
// (same address, actor, action, status and detail) adds to that one's
// count instead of writing an entry of its own.
func (s *Server) recordAudit(r *http.Request, rec *auditRecord, status int) (limited bool, wait time.Duration) {
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
	now := s.now()
	addr := remoteKey(r.RemoteAddr)
	if outcome == apiv1.OutcomeRefused {
		ok, wait, first := s.refusals.allow(addr, now)
		if !ok {
			s.droppedRefusals.Add(1)
			level := slog.LevelDebug
			if first {
				level = slog.LevelWarn
			}
			s.log.Log(r.Context(), level, "too many refused calls from one address; refusals answered 429 and not audited until it slows down",
				"request_id", requestID(r.Context()), "remote_addr", r.RemoteAddr, "action", rec.action, "status", status)
			return true, wait
		}
	}
	detail, err := json.Marshal(rec.detail)
	if err != nil {
		detail = []byte(`{}`)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.dbTimeout)
	defer cancel()
	entry := apiv1.AuditEntry{
		Actor:           rec.actor,
		Action:          rec.action,
		Outcome:         outcome,
		Status:          status,
		GenerationID:    rec.generationID,
		RequestID:       requestID(r.Context()),
		ClientRequestID: rec.clientRequestID,
		RemoteAddr:      r.RemoteAddr,
		Detail:          detail,
	}
	// An entry the database is away for is spooled (auditspool.go): at
	// once when the call was answered 503 for want of it, or when others
	// wait already (they go first); else after the write failed.
	logFailure := func(err error) {
		if db.IsUnavailable(err) {
			s.spoolAudit(r.Context(), entry, now, err)
			return
		}
		s.log.ErrorContext(r.Context(), "record audit entry", "request_id", entry.RequestID,
			"client_request_id", entry.ClientRequestID, "actor", entry.Actor, "action", rec.action,
			"outcome", outcome, "status", status, "remote_addr", r.RemoteAddr, "detail", string(detail), "err", err)
	}
	if rec.unavailable || s.spool.busy() {
		s.spoolAudit(r.Context(), entry, now, nil)
		return false, 0
	}
	if outcome != apiv1.OutcomeRefused {
		if _, err := s.store.RecordAudit(ctx, entry); err != nil {
			logFailure(err)
		}
		return false, 0
	}

	b, fresh := s.bursts.join(burstKey(addr, &entry), now)
	if !fresh {
		written := false
		select {
		case <-b.written:
			written = true
		case <-ctx.Done():
		}
		if written && b.id != 0 {
			err := s.store.AddAuditCount(ctx, b.id, 1)
			if err == nil {
				return false, 0
			}
			if db.IsUnavailable(err) {
				logFailure(err) // spooled as an entry of its own
				return false, 0
			}
			logFailure(fmt.Errorf("add to the count of entry %d: %w", b.id, err))
			return false, 0
		}
		// The first entry of the burst could not be written: this one is
		// tried on its own.
	}
	if n := s.refusals.takeDropped(addr); n > 0 {
		rec.detail["dropped"] = n
		if d, err := json.Marshal(rec.detail); err == nil {
			entry.Detail = d
		}
	}
	stored, err := s.store.RecordAudit(ctx, entry)
	if err != nil {
		logFailure(err)
	}
	if fresh && b != nil {
		b.id = stored.ID
		close(b.written)
	}
	return false, 0
}

// burstKey is what identical refusals share: remote address, actor,
// action, status, client request id and detail.
func burstKey(addr string, e *apiv1.AuditEntry) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range []string{addr, e.Actor, e.Action, strconv.Itoa(e.Status), e.ClientRequestID} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(e.Detail)
	var key [sha256.Size]byte
	h.Sum(key[:0])
	return key
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
