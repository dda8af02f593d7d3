package cache

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// t0 is the test clock's start.
var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func httpDate(t time.Time) string { return t.UTC().Format(httpTimeFormats[0]) }

// answer reads an answer of status with the fields "Name: value".
func answer(status int, fields ...string) *Answer {
	var a Answer
	a.Reset()
	a.Status = status
	for _, f := range fields {
		n, v, _ := strings.Cut(f, ":")
		a.Field(n, strings.TrimSpace(v))
	}
	return &a
}

func request(method string, fields ...string) *Request {
	var r Request
	r.Reset(method, false)
	pragma := false
	for _, f := range fields {
		n, v, _ := strings.Cut(f, ":")
		pragma = r.Field(n, strings.TrimSpace(v)) || pragma
	}
	_ = pragma
	return &r
}

func TestDirectives(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Directives
	}{
		{"", NoDirectives},
		{"no-store", Directives{NoStore: true, MaxAge: -1, SMaxAge: -1}},
		{"public, max-age=60", Directives{Public: true, MaxAge: 60, SMaxAge: -1}},
		{`MAX-AGE="30", S-MAXAGE=10`, Directives{MaxAge: 30, SMaxAge: 10}},
		{`private="Set-Cookie, X-A", no-cache="Foo"`, Directives{Private: true, NoCache: true, MaxAge: -1, SMaxAge: -1}},
		{"max-age=abc", Directives{MaxAge: 0, SMaxAge: -1}},
		{"max-age=99999999999999", Directives{MaxAge: 1 << 31, SMaxAge: -1}},
		{"must-revalidate, proxy-revalidate, unknown=1", Directives{MustRevalidate: true, ProxyRevalidate: true, MaxAge: -1, SMaxAge: -1}},
	}
	for _, tt := range tests {
		d := NoDirectives
		d.Parse(tt.in)
		if d != tt.want {
			t.Errorf("Parse(%q) = %+v, want %+v", tt.in, d, tt.want)
		}
	}
}

func TestStorable(t *testing.T) {
	t.Parallel()
	date := "Date: " + httpDate(t0)
	tests := []struct {
		name     string
		req      *Request
		ans      *Answer
		ttl      time.Duration
		lifetime time.Duration
		why      string
	}{
		{"max-age", request("GET"), answer(200, "Cache-Control: max-age=60"), 0, time.Minute, ""},
		{"s-maxage wins", request("GET"), answer(200, "Cache-Control: max-age=60, s-maxage=5"), 0, 5 * time.Second, ""},
		{"expires minus date", request("GET"), answer(200, date, "Expires: "+httpDate(t0.Add(90*time.Second))), 0, 90 * time.Second, ""},
		{"expires in the past", request("GET"), answer(200, date, "Expires: "+httpDate(t0.Add(-time.Hour))), 0, 0, ""},
		{"bad expires is stale", request("GET"), answer(200, date, "Expires: 0"), 0, 0, ""},
		{"max-age over expires", request("GET"), answer(200, date, "Expires: 0", "Cache-Control: max-age=7"), 0, 7 * time.Second, ""},
		{"default ttl", request("GET"), answer(200), 30 * time.Second, 30 * time.Second, ""},
		{"no freshness, no default", request("GET"), answer(200), 0, 0, NoFreshness},
		{"default ttl not for 302", request("GET"), answer(302), 30 * time.Second, 0, NoFreshness},
		{"302 with max-age", request("GET"), answer(302, "Cache-Control: max-age=9"), 0, 9 * time.Second, ""},
		{"no-cache stored, always stale", request("GET"), answer(200, "Cache-Control: no-cache, max-age=60", `ETag: "a"`), 0, 0, ""},
		{"no-store", request("GET"), answer(200, "Cache-Control: no-store, max-age=60"), 0, 0, AnswerNoStore},
		{"private", request("GET"), answer(200, "Cache-Control: private, max-age=60"), 0, 0, AnswerPrivate},
		{"set-cookie", request("GET"), answer(200, "Cache-Control: max-age=60", "Set-Cookie: a=b"), 0, 0, AnswerCookie},
		{"vary star", request("GET"), answer(200, "Cache-Control: max-age=60", "Vary: Accept, *"), 0, 0, AnswerVaryStar},
		{"authorization", request("GET", "Authorization: Bearer x"), answer(200, "Cache-Control: max-age=60"), 0, 0, AnswerAuth},
		{"authorization, public", request("GET", "Authorization: Bearer x"), answer(200, "Cache-Control: public, max-age=60"), 0, time.Minute, ""},
		{"authorization, s-maxage", request("GET", "Authorization: Bearer x"), answer(200, "Cache-Control: s-maxage=60"), 0, time.Minute, ""},
		{"status 500", request("GET"), answer(500, "Cache-Control: max-age=60"), 0, 0, StatusNotStored},
		{"status 206", request("GET"), answer(206, "Cache-Control: max-age=60"), 0, 0, StatusNotStored},
		{"HEAD is not stored", request("HEAD"), answer(200, "Cache-Control: max-age=60"), 0, 0, NotGET},
		{"POST", request("POST"), answer(200, "Cache-Control: max-age=60"), 0, 0, NotGET},
		{"request no-store", request("GET", "Cache-Control: no-store"), answer(200, "Cache-Control: max-age=60"), 0, 0, RequestNoStore},
		{"range", request("GET", "Range: bytes=0-1"), answer(200, "Cache-Control: max-age=60"), 0, 0, RequestPartial},
		{"conditional", request("GET", `If-None-Match: "a"`), answer(200, "Cache-Control: max-age=60"), 0, 0, RequestPartial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lifetime, why := Storable(tt.req, tt.ans, tt.ttl)
			if why != tt.why || why == "" && lifetime != tt.lifetime {
				t.Errorf("Storable = %v, %q; want %v, %q", lifetime, why, tt.lifetime, tt.why)
			}
		})
	}
}

func TestAgeAndDecide(t *testing.T) {
	t.Parallel()
	// Sent at t0, answered 2 s later with Age: 10 and a Date 1 s before
	// it was received: the initial age is 10 + 2 = 12 s.
	a := answer(200, "Cache-Control: max-age=60", "Age: 10", "Date: "+httpDate(t0.Add(time.Second)), `ETag: "v1"`)
	lifetime, why := Storable(request("GET"), a, 0)
	if why != "" {
		t.Fatal(why)
	}
	e := NewEntry(200, nil, []byte("x"), a, "/p", lifetime, t0, t0.Add(2*time.Second))
	if got := e.Age(t0.Add(2 * time.Second)); got != 12*time.Second {
		t.Fatalf("initial age %v, want 12s", got)
	}
	tests := []struct {
		name string
		req  *Request
		at   time.Duration // after t0
		want Use
	}{
		{"fresh", request("GET"), 10 * time.Second, Serve},
		{"last fresh second", request("GET"), 49 * time.Second, Serve},
		{"expired: revalidate with its ETag", request("GET"), 50 * time.Second, Revalidate},
		{"request no-cache", request("GET", "Cache-Control: no-cache"), 10 * time.Second, Revalidate},
		{"request max-age=0", request("GET", "Cache-Control: max-age=0"), 10 * time.Second, Revalidate},
		{"request max-age above its age", request("GET", "Cache-Control: max-age=30"), 10 * time.Second, Serve},
		{"request max-age below its age", request("GET", "Cache-Control: max-age=15"), 10 * time.Second, Revalidate},
	}
	for _, tt := range tests {
		if got := Decide(tt.req, e, t0.Add(tt.at)); got != tt.want {
			t.Errorf("%s: Decide = %d, want %d", tt.name, got, tt.want)
		}
	}
	noValidator := NewEntry(200, nil, nil, answer(200, "Cache-Control: max-age=1"), "/p", time.Second, t0, t0)
	if got := Decide(request("GET"), noValidator, t0.Add(time.Minute)); got != Forward {
		t.Errorf("stale without a validator: Decide = %d, want Forward", got)
	}
}

func TestRefreshed(t *testing.T) {
	t.Parallel()
	fields := []Field{{[]byte("Cache-Control"), []byte("max-age=10")}, {[]byte("ETag"), []byte(`"v1"`)}, {[]byte("X-Page"), []byte("a")}}
	a := answer(200, "Cache-Control: max-age=10", `ETag: "v1"`)
	e := NewEntry(200, fields, []byte("body"), a, "/p", 10*time.Second, t0, t0)
	later := t0.Add(time.Minute)
	if e.Fresh(later) {
		t.Fatal("fresh after a minute")
	}
	n := Refreshed(e, []Field{{[]byte("Cache-Control"), []byte("max-age=30")}, {[]byte("X-Page"), []byte("b")}}, later, later, 0)
	if n == nil || !n.Fresh(later.Add(29*time.Second)) || n.Fresh(later.Add(30*time.Second)) {
		t.Fatalf("refreshed entry %+v: want fresh for 30 s from the 304", n)
	}
	if string(n.Body) != "body" || n.ETag != `"v1"` {
		t.Errorf("refreshed entry lost its body or validator: %+v", n)
	}
	got := map[string]string{}
	for _, f := range n.Fields {
		got[string(f.Name)] = string(f.Value)
	}
	if got["X-Page"] != "b" || got["Cache-Control"] != "max-age=30" || len(n.Fields) != 3 {
		t.Errorf("merged fields %v", got)
	}
	if Refreshed(e, []Field{{[]byte("ETag"), []byte(`"v2"`)}}, later, later, 0) != nil {
		t.Error("a 304 naming another strong ETag refreshed the entry")
	}
}

func TestInvalidates(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		m    string
		code int
		want bool
	}{{"POST", 200, true}, {"DELETE", 204, true}, {"PUT", 302, true}, {"PATCH", 500, false}, {"POST", 404, false}, {"GET", 200, false}} {
		if got := Invalidates(tt.m, tt.code); got != tt.want {
			t.Errorf("Invalidates(%s, %d) = %v", tt.m, tt.code, got)
		}
	}
}

// clock is a test clock.
type clock struct{ now atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

func newClock() *clock {
	c := &clock{}
	c.now.Store(t0.UnixNano())
	return c
}

func TestStoreVary(t *testing.T) {
	t.Parallel()
	c := newClock()
	s, err := New(Options{MaxBytes: 1 << 20, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primary := string(Key(nil, "web-a", "Example.COM", "/page?x=1"))
	get := func(enc string) func(string) string {
		return func(n string) string {
			if n == "accept-encoding" {
				return enc
			}
			return ""
		}
	}
	for _, enc := range []string{"gzip", "br"} {
		a := answer(200, "Cache-Control: max-age=60", "Vary: Accept-Encoding")
		e := NewEntry(200, nil, []byte(enc), a, "/page", time.Minute, c.Now(), c.Now())
		s.Put(primary, get(enc), e, a.Vary)
	}
	for _, enc := range []string{"gzip", "br", " gzip "} {
		e, _ := s.Lookup(primary, get(enc))
		if e == nil || string(e.Body) != strings.TrimSpace(enc) {
			t.Errorf("Accept-Encoding %q: got %v", enc, e)
		}
	}
	if e, _ := s.Lookup(primary, get("identity")); e != nil {
		t.Errorf("a third variant was served another's body %q", e.Body)
	}
	if e, _ := s.Lookup(string(Key(nil, "web-b", "example.com", "/page?x=1")), get("gzip")); e != nil {
		t.Error("another branch's key found the entry")
	}
	s.Invalidate(primary)
	if e, _ := s.Lookup(primary, get("gzip")); e != nil {
		t.Error("an invalidated URL still answers")
	}
}

func TestStorePurgeAndBound(t *testing.T) {
	t.Parallel()
	evicted := atomic.Int64{}
	s, err := New(Options{MaxBytes: 1 << 20, OnEvict: func() { evicted.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	body := make([]byte, 10<<10)
	a := answer(200, "Cache-Control: max-age=60")
	for i := range 300 { // 3 MiB into 1 MiB
		path := fmt.Sprintf("/a/%d", i)
		if i%2 == 1 {
			path = fmt.Sprintf("/b/%d", i)
		}
		s.Put(string(Key(nil, "u", "h", path)), nil, NewEntry(200, nil, body, a, path, time.Minute, t0, t0), nil)
	}
	s.c.CleanUp()
	if b := s.Bytes(); b > 1<<20 {
		t.Fatalf("weight %d over the bound", b)
	}
	if evicted.Load() == 0 {
		t.Fatal("no eviction counted")
	}
	n := s.Len()
	removed := s.Purge("/a/")
	for _, e := range s.c.All() {
		if strings.HasPrefix(e.Path, "/a/") {
			t.Fatalf("purge left %s", e.Path)
		}
	}
	if removed == 0 || s.Len() != n-removed {
		t.Errorf("purge removed %d of %d, %d left", removed, n, s.Len())
	}
	s.Purge("")
	if s.Len() != 0 {
		t.Errorf("purge of all left %d", s.Len())
	}
}

func TestFlight(t *testing.T) {
	t.Parallel()
	s, err := New(Options{MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, leader := s.Lead("k")
	if !leader {
		t.Fatal("first is not the leader")
	}
	var wg sync.WaitGroup
	var landed atomic.Int64
	for range 10 {
		g, lead := s.Lead("k")
		if lead || g != f {
			t.Fatal("a second leader")
		}
		wg.Go(func() {
			if g.Wait(t.Context(), time.Minute) {
				landed.Add(1)
			}
		})
	}
	f.Land()
	f.Land()
	wg.Wait()
	if landed.Load() != 10 {
		t.Fatalf("%d of 10 saw the landing", landed.Load())
	}
	if _, lead := s.Lead("k"); !lead {
		t.Fatal("no new flight after the landing")
	}
}

// TestRequestField: field names in any case, none allocating (a cache hit
// reads every field of its request), and a name longer than any known one
// is no known one.
func TestRequestField(t *testing.T) { // not parallel: AllocsPerRun
	r := request("GET", "IF-NONE-MATCH: \"x\"", "authorization: Basic x", "Range: bytes=0-1", "cache-CONTROL: no-store")
	if !r.Conditional || !r.Authorization || !r.Range || !r.CC.NoStore {
		t.Errorf("request = %+v, want conditional, authorization, range and no-store", r)
	}
	if r.Field("Pragma", "No-Cache") != true {
		t.Error("Pragma: No-Cache is not a pragma no-cache")
	}
	var long Request
	long.Reset("GET", false)
	long.Field("If-None-Match-And-Much-Longer", "x")
	if long.Conditional {
		t.Error("a longer name was taken for If-None-Match")
	}
	allocs := testing.AllocsPerRun(100, func() {
		var q Request
		q.Reset("GET", false)
		q.Field("User-Agent", "wrk")
		q.Field("Accept-Encoding", "gzip")
		q.Field("X-Forwarded-For-A-Long-Field-Name", "1")
		q.Field("Cache-Control", "max-age=0")
	})
	if allocs != 0 {
		t.Errorf("reading four request fields made %v allocations, want 0", allocs)
	}
}
