// Package cache is the gateway's response cache: the decisions of a
// shared HTTP cache per RFC 9111 (policy.go: what may be stored, for how
// long, when a stored answer may be used, how a 304 refreshes it), kept
// free of any HTTP library and of the clock (every decision takes now),
// and the bounded store of one service's answers (store.go), over
// otter's W-TinyLFU cache weighed in bytes, with one upstream request per
// key in flight.
//
// The proxy (gateway/proxy/cache.go) does the rest: it keys a lookup by
// the branch the pick chose, so that an answer of one branch is never
// served to a session of another.
package cache

import (
	"strconv"
	"strings"
	"time"
)

// Directives are the Cache-Control directives of a request or an answer
// that the cache acts on (RFC 9111 section 5.2). MaxAge and SMaxAge are -1
// when absent. The zero value is not "none": use NoDirectives.
type Directives struct {
	NoStore, NoCache, Private, Public, MustRevalidate, ProxyRevalidate bool
	MaxAge, SMaxAge                                                    int
}

// NoDirectives is a Directives with no directive.
var NoDirectives = Directives{MaxAge: -1, SMaxAge: -1}

// Parse adds the directives of one Cache-Control field value to d. An
// unknown directive is ignored (RFC 9111 section 5.2.3); a max-age or
// s-maxage that is not a non-negative integer makes the answer stale
// (it is taken as 0, section 4.2.1's "invalid ... treated as stale").
// no-cache and private with a field list count as without one (the
// stricter reading). A quoted value may hold commas.
func (d *Directives) Parse(v string) {
	for v != "" {
		var tok string
		tok, v = nextDirective(v)
		name, arg, _ := strings.Cut(tok, "=")
		name = strings.TrimSpace(name)
		arg = strings.Trim(strings.TrimSpace(arg), `"`)
		switch strings.ToLower(name) {
		case "no-store":
			d.NoStore = true
		case "no-cache":
			d.NoCache = true
		case "private":
			d.Private = true
		case "public":
			d.Public = true
		case "must-revalidate":
			d.MustRevalidate = true
		case "proxy-revalidate":
			d.ProxyRevalidate = true
		case "max-age":
			d.MaxAge = seconds(arg)
		case "s-maxage":
			d.SMaxAge = seconds(arg)
		}
	}
}

// nextDirective splits the first directive off v, a comma outside quotes
// ending it.
func nextDirective(v string) (tok, rest string) {
	quoted := false
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case '\\':
			if quoted {
				i++
			}
		case ',':
			if !quoted {
				return v[:i], v[i+1:]
			}
		}
	}
	return v, ""
}

// seconds is a delta-seconds value (RFC 9111 section 1.2.2), 0 for an
// invalid one, capped at 2^31.
func seconds(s string) int {
	if s == "" {
		return 0
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		if n < 1<<31 {
			n = n*10 + int(c-'0')
		}
	}
	return min(n, 1<<31)
}

// Request is what the cache reads of a client's request.
type Request struct {
	// Method is the request method; only GET answers are stored, and a
	// HEAD is served from a GET's entry.
	Method string
	// CC is the request's Cache-Control; Pragma: no-cache without any
	// Cache-Control is no-cache (RFC 9111 section 5.4).
	CC Directives
	// Authorization: the request carries Authorization.
	Authorization bool
	// Conditional: the request carries its own If-None-Match,
	// If-Modified-Since, If-Match, If-Unmodified-Since or If-Range; Range:
	// it asks for a part. Neither is stored nor served from the cache.
	Conditional, Range bool
	// HasBody: the request has a body (a GET with one is passed through).
	HasBody bool
}

// Answer is what the cache reads of an endpoint's answer head.
type Answer struct {
	Status int
	CC     Directives
	// Date, Expires and LastModified are zero when absent; ExpiresBad is a
	// present Expires that is not a date (which means already expired).
	Date, Expires time.Time
	ExpiresBad    bool
	LastModified  string
	ETag          string
	// AgeSeconds is the Age field, 0 when absent.
	AgeSeconds int
	// Vary are the field names of the Vary fields, lower case; VaryStar a
	// Vary of "*".
	Vary     []string
	VaryStar bool
	// SetCookie: the answer sets a cookie.
	SetCookie bool
}

// heuristic reports whether status is cacheable by default (RFC 9110
// section 15.1), so that default_ttl_s may give it a freshness.
func heuristic(status int) bool {
	switch status {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// understood reports whether the cache may store an answer of status: the
// final codes it knows, 206 aside (it does not combine parts).
func understood(status int) bool {
	switch status {
	case 200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// Why a request or an answer is not stored; "" when it is.
const (
	NotGET          = "not a GET"
	RequestNoStore  = "request no-store"
	RequestPartial  = "range or conditional request"
	RequestBody     = "request with a body"
	StatusNotStored = "status not cacheable"
	AnswerNoStore   = "no-store"
	AnswerPrivate   = "private"
	AnswerCookie    = "Set-Cookie"
	AnswerVaryStar  = "Vary: *"
	AnswerAuth      = "Authorization without public or s-maxage"
	NoFreshness     = "no freshness and no default_ttl_s"
)

// Bypass reports why a request is neither looked up nor stored ("" when
// it may be): a method other than GET and HEAD, a body, a range or its own
// conditions, no-store.
func Bypass(r *Request) string {
	switch {
	case r.Method != "GET" && r.Method != "HEAD":
		return NotGET
	case r.HasBody:
		return RequestBody
	case r.Range || r.Conditional:
		return RequestPartial
	case r.CC.NoStore:
		return RequestNoStore
	}
	return ""
}

// Storable reports why the answer a to the request r may not be stored by
// a shared cache (RFC 9111 section 3), "" when it may, with its freshness
// lifetime (section 4.2.1; 0 for an answer stored only to be revalidated
// at each use, no-cache). defaultTTL is the lifetime of an answer
// cacheable by default that carries none; 0 stores no such answer.
func Storable(r *Request, a *Answer, defaultTTL time.Duration) (lifetime time.Duration, why string) {
	if r.Method != "GET" {
		return 0, NotGET
	}
	if why := Bypass(r); why != "" {
		return 0, why
	}
	switch {
	case !understood(a.Status):
		return 0, StatusNotStored
	case a.CC.NoStore:
		return 0, AnswerNoStore
	case a.CC.Private:
		return 0, AnswerPrivate
	case a.SetCookie:
		return 0, AnswerCookie
	case a.VaryStar:
		return 0, AnswerVaryStar
	case r.Authorization && !a.CC.Public && a.CC.SMaxAge < 0:
		return 0, AnswerAuth
	}
	lifetime, explicit := Lifetime(a, defaultTTL)
	if !explicit && lifetime == 0 && !a.CC.NoCache {
		// Nothing says it may be kept; with validators it could still be
		// stored to be revalidated, but an entry that is always stale
		// only costs a conditional request per use: not stored.
		return 0, NoFreshness
	}
	return lifetime, ""
}

// Lifetime is the freshness lifetime of a (RFC 9111 section 4.2.1):
// s-maxage, else max-age, else Expires minus Date, else defaultTTL for a
// status cacheable by default (section 4.2.2); explicit reports whether
// the answer said so itself. A no-cache answer has 0: it is revalidated
// at each use.
func Lifetime(a *Answer, defaultTTL time.Duration) (lifetime time.Duration, explicit bool) {
	switch {
	case a.CC.SMaxAge >= 0:
		lifetime, explicit = time.Duration(a.CC.SMaxAge)*time.Second, true
	case a.CC.MaxAge >= 0:
		lifetime, explicit = time.Duration(a.CC.MaxAge)*time.Second, true
	case a.ExpiresBad:
		lifetime, explicit = 0, true
	case !a.Expires.IsZero():
		date := a.Date
		if date.IsZero() {
			return 0, true // no Date to measure it from: stale
		}
		lifetime, explicit = max(a.Expires.Sub(date), 0), true
	case heuristic(a.Status) || a.CC.Public:
		lifetime = defaultTTL
	}
	if a.CC.NoCache {
		lifetime = 0
	}
	return lifetime, explicit
}

// InitialAge is the age of an answer when it is received (RFC 9111
// section 4.2.3): the larger of its apparent age (received minus Date)
// and its Age field plus the time the request took (received minus
// requested).
func InitialAge(a *Answer, requested, received time.Time) time.Duration {
	apparent := time.Duration(0)
	if !a.Date.IsZero() {
		apparent = max(received.Sub(a.Date), 0)
	}
	corrected := time.Duration(a.AgeSeconds)*time.Second + max(received.Sub(requested), 0)
	return max(apparent, corrected)
}

// Use is what to do with a stored entry for a request.
type Use uint8

const (
	// Serve: the entry is fresh enough for the request.
	Serve Use = iota
	// Revalidate: the entry is stale, or the request or the entry asks for
	// a check, and the entry has a validator: forward with its conditions.
	Revalidate
	// Forward: the entry may not be used and cannot be revalidated.
	Forward
)

// Decide says how to use the entry e for request r at now (RFC 9111
// section 4): served when fresh and neither the request (no-cache,
// max-age its age exceeds) nor the entry (no-cache) asks for a check,
// revalidated when it has a validator, else forwarded. A stale entry is
// never served (max-stale is not honoured), so must-revalidate holds.
func Decide(r *Request, e *Entry, now time.Time) Use {
	age := e.Age(now)
	fresh := age < e.Lifetime
	if r.CC.MaxAge >= 0 && age > time.Duration(r.CC.MaxAge)*time.Second {
		fresh = false
	}
	if fresh && !r.CC.NoCache {
		return Serve
	}
	if e.ETag != "" || e.LastModified != "" {
		return Revalidate
	}
	return Forward
}

// Invalidates reports whether an answer of status to a request of method
// invalidates the stored answers of its URL (RFC 9111 section 4.4): an
// unsafe method answered without an error.
func Invalidates(method string, status int) bool {
	switch method {
	case "POST", "PUT", "PATCH", "DELETE":
		return status >= 200 && status < 400
	}
	return false
}

// httpTimeFormats are the date forms of RFC 9110 section 5.6.7: the IMF
// fixdate, then the obsolete RFC 850 and asctime forms.
var httpTimeFormats = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	"Monday, 02-Jan-06 15:04:05 GMT",
	"Mon Jan _2 15:04:05 2006",
}

// ParseDate parses an HTTP date; ok is false for anything else.
func ParseDate(s string) (t time.Time, ok bool) {
	s = strings.TrimSpace(s)
	for _, f := range httpTimeFormats {
		if t, err := time.Parse(f, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

// AppendAge appends an Age field value to dst: whole seconds.
func AppendAge(dst []byte, d time.Duration) []byte {
	return strconv.AppendInt(dst, int64(max(d, 0)/time.Second), 10)
}
