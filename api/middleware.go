package api

import (
	"context"
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
	clientRequestIDKey
	auditKey
	actorKey
)

// Actors recorded when the caller did not (or could not) say who it is.
const (
	actorAnonymous       = "anonymous"
	actorUnauthenticated = "unauthenticated"
	// actorReadToken is the actor of a mutating call refused because it
	// presented the read token.
	actorReadToken = "read-token"
)

// maxActorLen is the longest accepted X-Dwara-Actor, in characters.
const maxActorLen = 64

// requestID returns the server's own id of the request, stored by
// withRequestID; "" outside a request.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// clientRequestID returns the well-formed X-Request-Id the client sent,
// stored by withRequestID; "" when it sent none (or a malformed one).
func clientRequestID(ctx context.Context) string {
	id, _ := ctx.Value(clientRequestIDKey).(string)
	return id
}

// withRequestID mints the server's own id of the request (the one its
// problems, the log and its audit entry name) and keeps a well-formed
// client X-Request-Id apart; the response's X-Request-Id echoes the
// client's id when it sent one, else the server's.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := apiv1.NewRequestID()
		ctx := context.WithValue(r.Context(), requestIDKey, id)
		echo := id
		if client := r.Header.Get(apiv1.RequestIDHeader); apiv1.ValidRequestID(client) {
			ctx = context.WithValue(ctx, clientRequestIDKey, client)
			echo = client
		}
		w.Header().Set(apiv1.RequestIDHeader, echo)
		next.ServeHTTP(w, r.WithContext(ctx))
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
			"client_request_id", clientRequestID(r.Context()),
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

// role is what a caller's bearer token lets it do.
type role int

const (
	roleNone  role = iota // no token, or a wrong one
	roleRead              // the read token: GET calls only
	roleAdmin             // the admin token: everything
)

// roleOf returns the role of a bearer token. Both digests are compared
// in constant time (over digests, so not even a token's length leaks), and
// both comparisons always run.
func (s *Server) roleOf(token string) role {
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	admin := subtle.ConstantTimeCompare(got[:], s.tokenSum[:]) == 1 && s.hasToken
	read := subtle.ConstantTimeCompare(got[:], s.readTokenSum[:]) == 1 && s.hasReadToken
	switch {
	case admin:
		return roleAdmin
	case read:
		return roleRead
	}
	return roleNone
}

// authenticate requires "Authorization: Bearer <token>" when the server has
// a token: the admin token for every call, or, when mutating is false, the
// read token too. A refusal is a 401 problem with a WWW-Authenticate
// challenge (the audit actor stays "unauthenticated"); a mutating call
// with the read token is a 403 problem, audited with the actor
// "read-token" (in a read-only API, one with a read token and no admin
// token, that is every mutating call that gets past the 401).
func (s *Server) authenticate(mutating bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if !s.hasToken && !s.hasReadToken {
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
				switch s.roleOf(token) {
				case roleAdmin:
					next.ServeHTTP(w, r)
					return
				case roleRead:
					if !mutating {
						next.ServeHTTP(w, r)
						return
					}
					if rec := auditFrom(r.Context()); rec != nil {
						rec.actor = actorReadToken
					}
					detail := "the read token may only read; this call changes the configuration and needs the admin token"
					if !s.hasToken {
						detail = "this API is read-only (it has a read token and no admin token); no call may change the configuration"
					}
					s.writeProblem(w, r, problemf(http.StatusForbidden, "%s", detail))
					return
				}
				p = problemf(http.StatusUnauthorized, "the bearer token is not valid")
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			s.writeProblem(w, r, p)
		})
	}
}

// noteClientRequestID keeps the client's X-Request-Id on the audit record
// of a call that got this far (past the Host check and authentication), as
// the entry's client_request_id; a caller refused before cannot put its
// choice into the audit log.
func noteClientRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec := auditFrom(r.Context()); rec != nil {
			rec.clientRequestID = clientRequestID(r.Context())
		}
		next.ServeHTTP(w, r)
	})
}

// withDeadline bounds the rest of the call, its database work above all,
// by Options.DatabaseTimeout.
func (s *Server) withDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.dbTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
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
			if rec := auditFrom(r.Context()); rec != nil {
				rec.actor = actorAnonymous // authenticated, but it did not say who it is
			}
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
