package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/dwara/dwara/api/apiv1"
)

type ctxKey int

const (
	requestIDKey ctxKey = iota
	auditKey
	actorKey
)

// Actors recorded when the caller did not (or could not) say who it is.
const (
	actorAnonymous       = "anonymous"
	actorUnauthenticated = "unauthenticated"
)

// maxActorLen is the longest accepted X-Dwara-Actor, in characters.
const maxActorLen = 64

// requestID returns the request id stored by withRequestID; "" outside a
// request.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// withRequestID keeps a well-formed client X-Request-Id or mints a fresh one,
// stores it in the request context and echoes it in the response.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(apiv1.RequestIDHeader)
		if !apiv1.ValidRequestID(id) {
			id = rand.Text()
		}
		w.Header().Set(apiv1.RequestIDHeader, id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// logRequests logs each request once it is answered: mutations at Info,
// reads at Debug, and every 5xx at Warn (the cause is logged at Error where
// it happened).
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK // the handler wrote nothing
		}
		level := slog.LevelDebug
		switch {
		case status >= 500:
			level = slog.LevelWarn
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "http request",
			"request_id", requestID(r.Context()),
			"method", r.Method,
			"path", r.URL.Path,
			"status", status,
			"duration", time.Since(start),
			"remote_addr", r.RemoteAddr)
	})
}

// recoverPanics turns a handler panic into a logged 500 problem (unless the
// answer was already started) instead of a dropped connection.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.ErrorContext(r.Context(), "handler panic", "request_id", requestID(r.Context()), "panic", v, "stack", string(debug.Stack()))
			s.internalError(w, r, fmt.Errorf("panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

// limitBodies caps every request body at apiv1.MaxBodyBytes.
func limitBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, apiv1.MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// authenticate requires "Authorization: Bearer <token>" when the server has a
// token; the comparison takes constant time (over digests, so not even the
// token's length leaks). A refusal is a 401 problem with a WWW-Authenticate
// challenge, and a mutation's audit record gets the actor "unauthenticated".
func (s *Server) authenticate(next http.Handler) http.Handler {
	if !s.hasToken {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		challenge := `Bearer realm="dwara"`
		var p *apiv1.Problem
		switch {
		case scheme == "":
			p = problemf(http.StatusUnauthorized, "this call needs an Authorization: Bearer <token> header")
		case !strings.EqualFold(scheme, "Bearer"):
			p = problemf(http.StatusUnauthorized, "the Authorization scheme must be Bearer")
			challenge += `, error="invalid_request"`
		default:
			got := sha256.Sum256([]byte(strings.TrimSpace(token)))
			if subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
			p = problemf(http.StatusUnauthorized, "the bearer token is not valid")
			challenge += `, error="invalid_token"`
		}
		if rec := auditFrom(r.Context()); rec != nil {
			rec.actor = actorUnauthenticated
		}
		w.Header().Set("WWW-Authenticate", challenge)
		s.writeProblem(w, r, p)
	})
}

// parseActor returns the trimmed X-Dwara-Actor header, "anonymous" when it is
// absent or blank, or a 400 Problem when it is longer than 64 characters or
// holds non-printable characters.
func parseActor(r *http.Request) (string, error) {
	a := strings.TrimSpace(r.Header.Get(apiv1.ActorHeader))
	if a == "" {
		return actorAnonymous, nil
	}
	if !utf8.ValidString(a) || utf8.RuneCountInString(a) > maxActorLen || strings.IndexFunc(a, func(c rune) bool { return !unicode.IsPrint(c) }) >= 0 {
		return "", fieldProblem(http.StatusBadRequest, apiv1.ActorHeader, "must be at most %d printable characters", maxActorLen)
	}
	return a, nil
}

// withActor resolves the caller's actor (400 when malformed), records it on
// the audit record and stores it in the context for actorFrom.
func (s *Server) withActor(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		actor, err := parseActor(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if rec := auditFrom(r.Context()); rec != nil {
			rec.actor = actor
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey, actor)))
	})
}

// actorFrom returns the actor stored by withActor, "anonymous" outside one.
func actorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(actorKey).(string); ok {
		return a
	}
	return actorAnonymous
}
