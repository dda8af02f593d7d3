package cache

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Field is one field line of a stored answer head.
type Field struct{ Name, Value []byte }

// Entry is one stored answer: its status, head and body, when it was
// received and for how long it is fresh. It is immutable once stored (a
// 304 stores a new one, Refreshed), so a hit reads it without locking.
type Entry struct {
	Status int
	// Fields are the answer's fields as stored (KeepField), in one
	// allocation with their bytes.
	Fields []Field
	Body   []byte
	// Received is when the answer arrived (RFC 9111's response_time);
	// InitialAge its age then; Lifetime its freshness lifetime.
	Received   time.Time
	InitialAge time.Duration
	Lifetime   time.Duration
	// ETag and LastModified are its validators, "" when absent.
	ETag, LastModified string
	// Path is the request path it answered, for a purge by prefix.
	Path string

	// A marker stands at a URL's key for the answers that vary by the
	// request fields vary: they are stored under the marker's id.
	marker bool
	vary   []string
	id     uint64
}

// Age is e's current age at now (RFC 9111 section 4.2.3).
func (e *Entry) Age(now time.Time) time.Duration {
	return e.InitialAge + max(now.Sub(e.Received), 0)
}

// Fresh reports whether e is fresh at now.
func (e *Entry) Fresh(now time.Time) bool { return e.Age(now) < e.Lifetime }

// entryOverhead is what an entry costs beyond its fields' and body's
// bytes: the Entry, its slice headers, its key and otter's node, as
// weighed (store.go); measured by TestMemoryBound.
const entryOverhead = 320

// weight is e's cost in bytes for the store's bound.
func (e *Entry) weight(key string) uint32 {
	n := entryOverhead + len(key) + len(e.Body) + len(e.ETag) + len(e.LastModified) + len(e.Path) + 16*len(e.Fields)
	for _, f := range e.Fields {
		n += len(f.Name) + len(f.Value)
	}
	for _, v := range e.vary {
		n += len(v) + 16
	}
	return uint32(min(n, 1<<31))
}

// KeepField reports whether an answer's field name (any case) is stored
// with it: not the hop-by-hop fields and the framing, which each answer
// has its own of, nor Age (computed at each hit), the request id, the
// cache's own fields, or Set-Cookie (never stored: Storable).
func KeepField(name []byte) bool {
	switch strings.ToLower(string(name)) {
	case "connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
		"te", "trailer", "transfer-encoding", "upgrade", "content-length",
		"age", "x-request-id", "x-cache", "x-dwara-branch", "set-cookie":
		return false
	}
	return true
}

// NewEntry is the entry of an answer of status with fields (those
// KeepField keeps; copied) and body (kept, not copied), requested at
// requested and received at received, with lifetime (Storable), the
// validators and age of a (ReadAnswer) and path its request's.
func NewEntry(status int, fields []Field, body []byte, a *Answer, path string, lifetime time.Duration, requested, received time.Time) *Entry {
	return &Entry{
		Status:       status,
		Fields:       copyFields(fields),
		Body:         body,
		Received:     received,
		InitialAge:   InitialAge(a, requested, received),
		Lifetime:     lifetime,
		ETag:         strings.Clone(a.ETag),
		LastModified: strings.Clone(a.LastModified),
		Path:         strings.Clone(path),
	}
}

// copyFields copies fields into one allocation of bytes.
func copyFields(fields []Field) []Field {
	n := 0
	for _, f := range fields {
		n += len(f.Name) + len(f.Value)
	}
	buf := make([]byte, 0, n)
	out := make([]Field, len(fields))
	for i, f := range fields {
		s := len(buf)
		buf = append(buf, f.Name...)
		m := len(buf)
		buf = append(buf, f.Value...)
		out[i] = Field{Name: buf[s:m:m], Value: buf[m:len(buf):len(buf)]}
	}
	return out
}

// Refreshed is e updated by a 304 answer (RFC 9111 section 4.3.4) whose
// fields are fields (those KeepField keeps): each field of the 304
// replaces the stored ones of its name, the freshness is computed again
// from the fields merged, and it was received at received. A 304 whose
// validator names another answer (a strong ETag that differs) gives nil:
// the entry is not to be used.
func Refreshed(e *Entry, fields []Field, requested, received time.Time, defaultTTL time.Duration) *Entry {
	var a Answer
	a.Reset()
	for _, f := range fields {
		a.Field(string(f.Name), string(f.Value))
	}
	if a.ETag != "" && e.ETag != "" && !strings.HasPrefix(a.ETag, "W/") && !strings.HasPrefix(e.ETag, "W/") && a.ETag != e.ETag {
		return nil
	}
	merged := make([]Field, 0, len(e.Fields)+len(fields))
	for _, f := range e.Fields {
		if !slices.ContainsFunc(fields, func(g Field) bool { return bytes.EqualFold(g.Name, f.Name) }) {
			merged = append(merged, f)
		}
	}
	merged = append(merged, fields...)
	var m Answer
	m.Reset()
	m.Status = e.Status
	for _, f := range merged {
		m.Field(string(f.Name), string(f.Value))
	}
	lifetime, _ := Lifetime(&m, defaultTTL)
	n := NewEntry(e.Status, merged, e.Body, &m, e.Path, lifetime, requested, received)
	return n
}

// Reset empties a for the fields of a new answer (no directives).
func (a *Answer) Reset() {
	*a = Answer{CC: NoDirectives}
}

// Field reads one field line of an answer head into a; values are copied
// where a keeps them.
func (a *Answer) Field(name, value string) {
	switch strings.ToLower(name) {
	case "cache-control":
		a.CC.Parse(value)
	case "date":
		a.Date, _ = ParseDate(value)
	case "expires":
		t, ok := ParseDate(value)
		a.Expires, a.ExpiresBad = t, !ok
	case "last-modified":
		a.LastModified = strings.Clone(strings.TrimSpace(value))
	case "etag":
		a.ETag = strings.Clone(strings.TrimSpace(value))
	case "age":
		a.AgeSeconds = seconds(strings.TrimSpace(value))
	case "set-cookie":
		a.SetCookie = true
	case "vary":
		for _, v := range strings.Split(value, ",") {
			v = strings.ToLower(strings.TrimSpace(v))
			switch {
			case v == "*":
				a.VaryStar = true
			case v != "" && !slices.Contains(a.Vary, v):
				a.Vary = append(a.Vary, v)
			}
		}
	}
}

// Reset empties r for the fields of a new request of method, with a body
// or not.
func (r *Request) Reset(method string, hasBody bool) {
	*r = Request{Method: method, CC: NoDirectives, HasBody: hasBody}
}

// Field reads one field line of a request head into r. pragma reports a
// Pragma: no-cache, which counts only when the request has no
// Cache-Control (Finish).
func (r *Request) Field(name, value string) (pragma bool) {
	var buf [24]byte // every name below fits
	switch string(lowerASCII(buf[:0], name)) {
	case "cache-control":
		r.CC.Parse(value)
	case "pragma":
		return strings.Contains(strings.ToLower(value), "no-cache")
	case "authorization":
		r.Authorization = true
	case "range":
		r.Range = true
	case "if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range":
		r.Conditional = true
	}
	return false
}

// lowerASCII returns s in ASCII lower case in dst's array when it fits
// in its capacity, and nil when it does not: for a switch over known
// names, every one of which fits, without the allocation of
// strings.ToLower (which a request's own field names, User-Agent and the
// like, would make on every request).
func lowerASCII(dst []byte, s string) []byte {
	if len(s) > cap(dst) {
		return nil
	}
	b := dst[:len(s)]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return b
}

// VaryKey appends to dst the key part of the request fields names (lower
// case, sorted) with the values get gives (all the request's lines of the
// name joined by commas, "" when none), so that two requests share an
// answer stored with Vary names only when their values are the same.
func VaryKey(dst []byte, names []string, get func(name string) string) []byte {
	for _, n := range names {
		dst = append(dst, n...)
		dst = append(dst, '=')
		dst = strconv.AppendQuote(dst, normalise(get(n)))
		dst = append(dst, 0)
	}
	return dst
}

// normalise removes the whitespace around the list elements of v.
func normalise(v string) string {
	if !strings.ContainsAny(v, " \t") {
		return v
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return strings.Join(parts, ",")
}
