package httpfront

import (
	"net/http"
	"slices"
	"testing"

	"github.com/dwara/dwara/gateway/proxy"
)

// headerWriter is a ResponseWriter that keeps one header map and counts
// nothing else: what CopyAnswer allocates through stdAnswer is the
// front's own.
type headerWriter struct {
	h    http.Header
	code int
}

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(code int)        { w.code = code }

// TestStdAnswerCopiesInOrder: the net/http front's copy of an answer head
// keeps every value, in the endpoint's order, after a value the front set
// first (the sticky session's Set-Cookie), with the request id last.
func TestStdAnswerCopiesInOrder(t *testing.T) {
	t.Parallel()
	a := &proxy.AnswerHead{Status: 201, Length: -1, Fields: []proxy.AnswerField{
		{Name: []byte("Content-Type"), Value: []byte("text/plain")},
		{Name: []byte("set-cookie"), Value: []byte("a=1")},
		{Name: []byte("X-Pool"), Value: []byte("stable")},
		{Name: []byte("Set-Cookie"), Value: []byte("b=2")},
		{Name: []byte("Trailer"), Value: []byte("X-Sum")},
	}}
	hw := &headerWriter{h: http.Header{"Set-Cookie": {"dwara=s1"}}}
	sw := getStatusWriter(hw)
	defer putStatusWriter(sw)
	proxy.CopyAnswer(a, (*stdAnswer)(sw), "rid-1")
	want := http.Header{
		"Content-Type": {"text/plain"},
		"Set-Cookie":   {"dwara=s1", "a=1", "b=2"},
		"X-Pool":       {"stable"},
		"Trailer":      {"X-Sum"},
		"X-Request-Id": {"rid-1"},
	}
	if hw.code != 201 {
		t.Errorf("status %d, want 201", hw.code)
	}
	for k, vv := range want {
		if !slices.Equal(hw.h[k], vv) {
			t.Errorf("%s: %q, want %q", k, hw.h[k], vv)
		}
	}
	if len(hw.h) != len(want) {
		t.Errorf("header %v, want %v", hw.h, want)
	}
}

// TestStdAnswerOneStringForValues: the values of an answer's fields are
// one string with the names that are not common ones, not a string each:
// copying a head of four fields, two of them of uncommon names, allocates
// that string and the slice of the values (7 when each value and each
// uncommon name was a string of its own).
func TestStdAnswerOneStringForValues(t *testing.T) {
	a := &proxy.AnswerHead{Status: 200, Length: -1, Fields: []proxy.AnswerField{
		{Name: []byte("Content-Type"), Value: []byte("text/plain; charset=utf-8")},
		{Name: []byte("Date"), Value: []byte("Sun, 06 Dec 2026 21:32:42 GMT")},
		{Name: []byte("X-Pool"), Value: []byte("stable")},
		{Name: []byte("X-Upstream"), Value: []byte("127.0.0.1:40001")},
	}}
	hw := &headerWriter{h: http.Header{}}
	sw := getStatusWriter(hw)
	defer putStatusWriter(sw)
	copyOnce := func() {
		clear(hw.h)
		sw.values = make([]string, 0, len(a.Fields)+2)
		proxy.CopyAnswer(a, (*stdAnswer)(sw), "rid-1")
	}
	copyOnce() // the header map and the writer's buffers grow once
	if n := testing.AllocsPerRun(200, copyOnce); n > 2 {
		t.Errorf("%.1f allocations a copy of 4 fields, want at most 2 (the values' string and slice)", n)
	}
	if got := hw.h["X-Upstream"]; !slices.Equal(got, []string{"127.0.0.1:40001"}) {
		t.Errorf("X-Upstream %q", got)
	}
}

// TestAppendCanonicalKey: the front's canonical form of a field name is
// net/http's, for tokens of every kind of character.
func TestAppendCanonicalKey(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"x-pool", "X-POOL", "x-Upstream-ID", "content-md5", "a", "A", "-x", "x--y",
		"www-authenticate", "x_under_score", "x.dot", "1abc", "x-1-b", "!#$%&'*+-.^_`|~", "etag"} {
		got := string(appendCanonicalKey(nil, []byte(name)))
		if want := http.CanonicalHeaderKey(name); got != want {
			t.Errorf("%q: %q, want %q", name, got, want)
		}
	}
}

// TestRequestIDOneAllocation: a request without a usable X-Request-Id
// gets a fresh one, set on the request, in one allocation.
func TestRequestIDOneAllocation(t *testing.T) {
	r := &http.Request{Header: http.Header{"X-Request-Id": {"bad id with spaces"}}}
	id := requestID(r)
	if len(id) != 32 || r.Header.Get("X-Request-Id") != id {
		t.Fatalf("id %q, header %q", id, r.Header["X-Request-Id"])
	}
	if again := requestID(r); again != id {
		t.Errorf("a well-formed id is kept: %q, then %q", id, again)
	}
	h := http.Header{}
	r.Header = h
	if n := testing.AllocsPerRun(200, func() { delete(h, "X-Request-Id"); requestID(r) }); n > 1 {
		t.Errorf("%.1f allocations for a fresh request id, want 1", n)
	}
}
