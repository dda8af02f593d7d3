package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/cache"
	"github.com/dwara/dwara/gateway/split"
	"github.com/dwara/dwara/internal/testrun"
)

// testClock is a clock the tests move by hand.
type testClock struct{ now atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.now.Store(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() time.Time          { return time.Unix(0, c.now.Load()) }
func (c *testClock) Advance(d time.Duration) { c.now.Add(int64(d)) }

// branchServer is an endpoint of one branch: handle answers each request
// (after the server counted it), and hits counts them by path.
type branchServer struct {
	name   string
	addr   string
	mu     sync.Mutex
	hits   map[string]int
	total  atomic.Int64
	handle func(w http.ResponseWriter, r *http.Request)
}

func (b *branchServer) count(path string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hits[path]
}

// startBranch starts a branch whose default answer is a page naming it,
// fresh for ten minutes.
func startBranch(t *testing.T, name string) *branchServer {
	b := &branchServer{name: name, hits: map[string]int{}}
	b.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "branch=%s path=%s", name, r.URL.Path)
	}
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.hits[r.URL.Path]++
		b.mu.Unlock()
		b.total.Add(1)
		b.handle(w, r)
	}))
	b.addr = hostOf(srv.URL)
	return b
}

// cachingGateway starts a gateway on front whose service web splits
// 50/50 over the branches, sticky when sticky, with cache settings
// cacheYAML (a YAML flow mapping), on the test clock c (nil: time.Now).
func cachingGateway(t *testing.T, front string, c *testClock, sticky bool, cacheYAML string, branches ...*branchServer) *gateway {
	t.Helper()
	g := startGateway(t, front)
	if c != nil {
		g.cacheClock = c.Now
	}
	g.apply(t, 1, cacheSpec(sticky, cacheYAML, branches...))
	return g
}

func cacheSpec(sticky bool, cacheYAML string, branches ...*branchServer) string {
	var ups, tgs []string
	for _, b := range branches {
		ups = append(ups, fmt.Sprintf("{name: %s, endpoints: [%q]}", b.name, b.addr))
		tgs = append(tgs, fmt.Sprintf("{upstream: %s, weight: 1}", b.name))
	}
	svc := "{name: web, upstream: " + branches[0].name
	if len(branches) > 1 {
		svc = "{name: web, split: {targets: [" + strings.Join(tgs, ", ") + "]}"
	}
	if sticky {
		svc += ", sticky: {cookie: sid}"
	}
	if cacheYAML != "" {
		svc += ", cache: " + cacheYAML
	}
	return "upstreams: [" + strings.Join(ups, ", ") + "]\nservices: [" + svc + "}]\n"
}

// do sends one request and returns the answer with its body read.
func do(t testing.TB, method, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// TestCacheBranchAware: a 50/50 sticky split whose two branches answer
// cacheable pages naming their branch, 2,000 sessions of 5 requests each
// (16 at a time): no answer names another branch than the one the
// session's cookie picks (by the split's own hash walk), every first
// request gets its cookie, hit or not, and after a warm-up of 200
// requests more than 80% are hits.
func TestCacheBranchAware(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a, b := startBranch(t, "a"), startBranch(t, "b")
		g := cachingGateway(t, front, nil, true, "{max_bytes: 16777216}", a, b)
		sp, err := split.New([]int{1, 1})
		if err != nil {
			t.Fatal(err)
		}
		const sessions, perSession, workers, warmup = 2000, 5, 16, 200
		var (
			wrong, hits, counted, done atomic.Int64
			firstErr                   atomic.Pointer[string]
			wg                         sync.WaitGroup
		)
		fail := func(format string, args ...any) {
			msg := fmt.Sprintf(format, args...)
			firstErr.CompareAndSwap(nil, &msg)
			wrong.Add(1)
		}
		next := atomic.Int64{}
		for range workers {
			wg.Go(func() {
				for {
					s := next.Add(1) - 1
					if s >= sessions || firstErr.Load() != nil {
						return
					}
					jar, _ := cookiejar.New(nil)
					c := &http.Client{Transport: client.Transport, Jar: jar, Timeout: 10 * time.Second}
					want := ""
					for i := range perSession {
						path := fmt.Sprintf("/page/%d", (int(s)+i)%10)
						resp, err := c.Get(g.URL + path)
						if err != nil {
							fail("session %d request %d: %v", s, i, err)
							return
						}
						body, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if i == 0 {
							ck := resp.Header.Get("Set-Cookie")
							val, ok := strings.CutPrefix(strings.SplitN(ck, ";", 2)[0], "sid=")
							if !ok || !affinity.Valid(val) {
								fail("session %d: first answer (X-Cache %s) set no cookie: %q", s, resp.Header.Get("X-Cache"), ck)
								return
							}
							want = []string{"a", "b"}[sp.PickHash(split.Hash(val))]
						} else if resp.Header.Get("Set-Cookie") != "" {
							fail("session %d request %d: cookie set again", s, i)
						}
						if string(body) != "branch="+want+" path="+path || resp.Header.Get("X-Dwara-Branch") != want {
							fail("session %d (branch %s) request %d: %q, X-Dwara-Branch %q, X-Cache %q", s, want, i, body, resp.Header.Get("X-Dwara-Branch"), resp.Header.Get("X-Cache"))
						}
						if done.Add(1) > warmup {
							counted.Add(1)
							if resp.Header.Get("X-Cache") == "HIT" {
								hits.Add(1)
							}
						}
					}
				}
			})
		}
		wg.Wait()
		if p := firstErr.Load(); p != nil {
			t.Fatalf("%d wrong answers; first: %s", wrong.Load(), *p)
		}
		ratio := float64(hits.Load()) / float64(counted.Load())
		t.Logf("%d requests, hit ratio after warm-up %.4f, upstream requests a=%d b=%d", done.Load(), ratio, a.total.Load(), b.total.Load())
		if ratio <= 0.8 {
			t.Errorf("hit ratio %.3f after warm-up, want > 0.8", ratio)
		}
		if got := testutil.ToFloat64(g.cm.requests.WithLabelValues("web", "a", "hit")) + testutil.ToFloat64(g.cm.requests.WithLabelValues("web", "b", "hit")); got < float64(hits.Load()) {
			t.Errorf("dwara_cache_requests_total{result=hit} = %v, fewer than the %d hits seen", got, hits.Load())
		}
	})
}

// TestCacheNeverStored: answers that a shared cache must not store
// (no-store, private, Set-Cookie, Vary: *, an answer to a request with
// Authorization without public or s-maxage, a 500) reach the endpoint
// every time and are never answered HIT; the same with public, or with
// s-maxage for the Authorization request, are stored.
func TestCacheNeverStored(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startBranch(t, "a")
		a.handle = func(w http.ResponseWriter, r *http.Request) {
			code := http.StatusOK
			switch r.URL.Path {
			case "/no-store":
				w.Header().Set("Cache-Control", "no-store, max-age=600")
			case "/private":
				w.Header().Set("Cache-Control", "private, max-age=600")
			case "/cookie":
				w.Header().Set("Cache-Control", "max-age=600")
				w.Header().Set("Set-Cookie", "user=1")
			case "/vary-star":
				w.Header().Set("Cache-Control", "max-age=600")
				w.Header().Set("Vary", "*")
			case "/auth", "/auth-public", "/auth-smaxage":
				w.Header().Set("Cache-Control", map[string]string{"/auth": "max-age=600", "/auth-public": "public, max-age=600", "/auth-smaxage": "s-maxage=600"}[r.URL.Path])
			case "/error":
				w.Header().Set("Cache-Control", "max-age=600")
				code = http.StatusInternalServerError
			}
			w.WriteHeader(code)
			io.WriteString(w, "page "+r.URL.Path)
		}
		g := cachingGateway(t, front, nil, false, "{max_bytes: 16777216, default_ttl_s: 600}", a)
		for _, tt := range []struct {
			path   string
			auth   bool
			stored bool
		}{
			{"/no-store", false, false},
			{"/private", false, false},
			{"/cookie", false, false},
			{"/vary-star", false, false},
			{"/auth", true, false},
			{"/error", false, false},
			{"/auth-public", true, true},
			{"/auth-smaxage", true, true},
			{"/plain", false, true},
		} {
			var hdr map[string]string
			if tt.auth {
				hdr = map[string]string{"Authorization": "Bearer secret"}
			}
			for i := range 3 {
				resp, body := do(t, "GET", g.URL+tt.path, hdr)
				xc := resp.Header.Get("X-Cache")
				if body != "page "+tt.path {
					t.Fatalf("%s: body %q", tt.path, body)
				}
				if !tt.stored && xc == "HIT" {
					t.Errorf("%s request %d: served from the cache", tt.path, i)
				}
				if tt.stored && i > 0 && xc != "HIT" {
					t.Errorf("%s request %d: X-Cache %q, want HIT", tt.path, i, xc)
				}
			}
			want := 3
			if tt.stored {
				want = 1
			}
			if got := a.count(tt.path); got != want {
				t.Errorf("%s: %d requests reached the endpoint, want %d", tt.path, got, want)
			}
		}
	})
}

// TestCacheVary: an answer with Vary: Accept-Encoding is stored per
// value: gzip and br clients each get their own variant, and two
// requests of each make two upstream requests in all; vary_headers keys
// by a field the answers do not name.
func TestCacheVary(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startBranch(t, "a")
		a.handle = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			if r.URL.Path == "/vary" {
				w.Header().Set("Vary", "Accept-Encoding")
			}
			fmt.Fprintf(w, "enc=%s lang=%s", r.Header.Get("Accept-Encoding"), r.Header.Get("Accept-Language"))
		}
		g := cachingGateway(t, front, nil, false, "{max_bytes: 16777216, vary_headers: [Accept-Language]}", a)
		for range 2 {
			for _, enc := range []string{"gzip", "br"} {
				for _, lang := range []string{"en", "fr"} {
					_, body := do(t, "GET", g.URL+"/vary", map[string]string{"Accept-Encoding": enc, "Accept-Language": lang})
					if want := "enc=" + enc + " lang=" + lang; body != want {
						t.Fatalf("Accept-Encoding %s, Accept-Language %s: got %q", enc, lang, body)
					}
				}
			}
		}
		if got := a.count("/vary"); got != 4 {
			t.Errorf("%d upstream requests for 2 encodings x 2 languages, want 4", got)
		}
	})
}

// TestCacheRevalidationAndExpiry, on a test clock: an entry is a HIT with
// its Age while fresh; once max-age has passed, an entry with an ETag is
// revalidated with If-None-Match and the endpoint's 304 refreshes it
// (the client gets the stored page, REVALIDATED, then HITs again); one
// without a validator is fetched again. A request's no-cache revalidates
// a fresh entry; a HEAD is served from the GET's entry.
func TestCacheRevalidationAndExpiry(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		clk := newTestClock()
		a := startBranch(t, "a")
		var conditional atomic.Int64
		a.handle = func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			if r.URL.Path == "/etag" {
				w.Header().Set("ETag", `"v1"`)
				if r.Header.Get("If-None-Match") == `"v1"` {
					conditional.Add(1)
					w.WriteHeader(http.StatusNotModified)
					return
				}
			}
			fmt.Fprintf(w, "page %s %d", r.URL.Path, a.count(r.URL.Path))
		}
		g := cachingGateway(t, front, clk, false, "{max_bytes: 16777216}", a)
		expect := func(path, method, xcache, body, age string, hdr map[string]string) {
			t.Helper()
			resp, got := do(t, method, g.URL+path, hdr)
			if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != xcache || got != body || age != "" && resp.Header.Get("Age") != age {
				t.Fatalf("%s %s: %d X-Cache %q Age %q body %q; want 200 %s Age %q body %q",
					method, path, resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("Age"), got, xcache, age, body)
			}
		}
		expect("/etag", "GET", "MISS", "page /etag 1", "", nil)
		clk.Advance(30 * time.Second)
		expect("/etag", "GET", "HIT", "page /etag 1", "30", nil)
		expect("/etag", "HEAD", "HIT", "", "30", nil)
		clk.Advance(31 * time.Second)
		expect("/etag", "GET", "REVALIDATED", "page /etag 1", "0", nil)
		clk.Advance(59 * time.Second)
		expect("/etag", "GET", "HIT", "page /etag 1", "59", nil)
		expect("/etag", "GET", "REVALIDATED", "page /etag 1", "", map[string]string{"Cache-Control": "no-cache"})
		if got := conditional.Load(); got != 2 {
			t.Errorf("%d conditional requests, want 2", got)
		}
		if got := a.count("/etag"); got != 3 {
			t.Errorf("%d upstream requests for /etag, want 3 (a miss and two revalidations)", got)
		}

		expect("/plain", "GET", "MISS", "page /plain 1", "", nil)
		clk.Advance(59 * time.Second)
		expect("/plain", "GET", "HIT", "page /plain 1", "59", nil)
		clk.Advance(time.Second)
		expect("/plain", "GET", "MISS", "page /plain 2", "", nil)
	})
}

// TestCacheCollapsedMisses: 100 concurrent requests of one key while its
// first is held at the endpoint make one upstream request; the 99 others
// wait for it and are all served its page.
func TestCacheCollapsedMisses(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startBranch(t, "a")
		release := make(chan struct{})
		a.handle = func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-time.After(conformanceDeadline):
			}
			w.Header().Set("Cache-Control", "max-age=600")
			io.WriteString(w, strings.Repeat("x", 100<<10)) // streamed, over the connection's buffer
		}
		g := cachingGateway(t, front, nil, false, "{max_bytes: 16777216}", a)
		store := g.Current().caches["web"].store
		const n = 100
		var wg sync.WaitGroup
		var bad atomic.Int64
		for range n {
			wg.Go(func() {
				resp, err := client.Get(g.URL + "/hot")
				if err != nil {
					bad.Add(1)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || len(body) != 100<<10 {
					bad.Add(1)
				}
			})
		}
		testrun.Eventually(t, "99 requests waiting for the first", func() bool { return store.Waiting() == n-1 })
		close(release)
		wg.Wait()
		if bad.Load() > 0 {
			t.Errorf("%d of %d requests failed", bad.Load(), n)
		}
		if got := a.count("/hot"); got != 1 {
			t.Errorf("%d upstream requests for %d concurrent misses, want 1", got, n)
		}
	})
}

// TestCacheInvalidationAndPurge: a successful POST to a URL invalidates
// its entry; PurgeCache empties by path prefix; a generation that keeps
// the service's targets and cache keeps the entries, one that changes an
// endpoint starts empty.
func TestCacheInvalidationAndPurge(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startBranch(t, "a")
		cacheYAML := "{max_bytes: 16777216}"
		g := cachingGateway(t, front, nil, false, cacheYAML, a)
		xcache := func(method, path string) string {
			resp, _ := do(t, method, g.URL+path, nil)
			return resp.Header.Get("X-Cache")
		}
		for _, p := range []string{"/x/1", "/x/2", "/y/1"} {
			xcache("GET", p)
		}
		if got := xcache("GET", "/x/1"); got != "HIT" {
			t.Fatalf("second GET: %q", got)
		}
		if got := xcache("POST", "/x/1"); got != "BYPASS" {
			t.Errorf("POST: X-Cache %q, want BYPASS", got)
		}
		if got := xcache("GET", "/x/1"); got != "MISS" {
			t.Errorf("GET after a POST: %q, want MISS", got)
		}
		if n, ok := g.PurgeCache("web", "/x/"); !ok || n != 2 {
			t.Errorf("PurgeCache(/x/) = %d, %v; want 2 entries", n, ok)
		}
		if got := xcache("GET", "/y/1"); got != "HIT" {
			t.Errorf("/y/1 after purging /x/: %q, want HIT", got)
		}
		if got := xcache("GET", "/x/2"); got != "MISS" {
			t.Errorf("/x/2 after purging /x/: %q, want MISS", got)
		}
		g.apply(t, 2, cacheSpec(false, cacheYAML, a))
		if got := xcache("GET", "/y/1"); got != "HIT" {
			t.Errorf("after a generation with the same targets: %q, want HIT", got)
		}
		b := startBranch(t, "a")
		g.apply(t, 3, cacheSpec(false, cacheYAML, b))
		if got := xcache("GET", "/y/1"); got != "MISS" {
			t.Errorf("after a generation that moved the endpoint: %q, want MISS", got)
		}
		if _, ok := g.PurgeCache("nope", ""); ok {
			t.Error("PurgeCache of an unknown service found one")
		}

		// CacheStats counts by result since the service's cache began;
		// PurgeAllCaches empties it.
		st, ok := g.CacheStats("web")
		if !ok || st.Entries != 1 || st.Bytes == 0 || st.MaxBytes != 16777216 {
			t.Errorf("CacheStats = %+v, %v; want /y/1's one entry of a 16 MiB cache", st, ok)
		}
		if st.Hits != 3 || st.Misses != 6 || st.Bypassed != 1 {
			t.Errorf("CacheStats counts %d hits, %d misses, %d bypassed; want 3, 6, 1", st.Hits, st.Misses, st.Bypassed)
		}
		if n := g.PurgeAllCaches(); n != 1 {
			t.Errorf("PurgeAllCaches removed %d entries, want 1", n)
		}
		if got := xcache("GET", "/y/1"); got != "MISS" {
			t.Errorf("/y/1 after PurgeAllCaches: %q, want MISS", got)
		}
		if _, ok := g.CacheStats("nope"); ok {
			t.Error("CacheStats of an unknown service found one")
		}
	})
}

// cacheHeapOverhead is what a full cache may take beyond its max_bytes:
// otter's own tables and frequency sketch, the heap's fragmentation, and
// the rest of the test's process between the two measurements.
const cacheHeapOverhead = 24 << 20

// TestCacheMemoryBound: filling a service whose cache has max_bytes 64 MiB
// with ten times that in distinct answers (1,280 of 512 KiB) keeps the
// live heap (after a GC) within the bound plus cacheHeapOverhead, and the
// store's own weight within the bound; evictions are counted. Not
// parallel: it measures the process's heap. Under the race detector,
// where this takes minutes, the cache is 16 MiB (filled with 160 MiB).
func TestCacheMemoryBound(t *testing.T) {
	a := startBranch(t, "a")
	page := strings.Repeat("m", 512<<10)
	a.handle = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if strings.HasSuffix(r.URL.Path, "/chunked") {
			w.(http.Flusher).Flush() // no Content-Length: chunked
		}
		io.WriteString(w, page)
	}
	maxBytes := 64 << 20
	if raceEnabled {
		maxBytes = 16 << 20
	}
	g := cachingGateway(t, "fasthttp", nil, false, fmt.Sprintf("{max_bytes: %d}", maxBytes), a)
	store := g.Current().caches["web"].store
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	n := int64(10 * maxBytes / (512 << 10))
	var wg sync.WaitGroup
	var failed atomic.Int64
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= n || failed.Load() > 0 {
					return
				}
				path := fmt.Sprintf("/fill/%d", i)
				if i%4 == 0 {
					path += "/chunked"
				}
				resp, err := client.Get(g.URL + path)
				if err != nil {
					failed.Add(1)
					return
				}
				got, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if got != int64(len(page)) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	store.CleanUp()
	grown := int64(heap()) - int64(base)
	t.Logf("%d answers of 512 KiB; store %d entries, %d bytes weighed; heap grew by %.1f MiB (bound %d MiB + %d MiB)",
		n, store.Len(), store.Bytes(), float64(grown)/(1<<20), maxBytes>>20, cacheHeapOverhead>>20)
	if store.Bytes() > uint64(maxBytes) {
		t.Errorf("store weighs %d bytes, over max_bytes %d", store.Bytes(), maxBytes)
	}
	if store.Bytes() < uint64(maxBytes/2) {
		t.Errorf("store weighs only %d bytes: the fill did not fill it", store.Bytes())
	}
	if grown > int64(maxBytes+cacheHeapOverhead) {
		t.Errorf("heap grew by %d bytes, over %d + %d", grown, maxBytes, cacheHeapOverhead)
	}
	if got := testutil.ToFloat64(g.cm.evictions.WithLabelValues("web")); got == 0 {
		t.Error("no eviction counted in dwara_cache_evictions_total")
	}
}

// TestCacheHitsAndTheCanary: on a sticky 50/50 canary group with a cache,
// 200 new sessions each fetch one cacheable page: every session is one
// exposure and gets its cookie, hit or not, but only the two upstream
// exchanges (one per branch) are recorded in the canary window and in
// dwara_requests_total; the hits are in dwara_cache_requests_total.
func TestCacheHitsAndTheCanary(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a, b := startBranch(t, "a"), startBranch(t, "b")
		sink := &recordingSink{}
		g := exposureGateway(t, front, sink, 0)
		spec := mustParse(t, cacheSpec(true, "{max_bytes: 16777216}", a, b))
		ca := withAnalysis
		spec.Services[0].Split.CanaryAnalysis = &ca
		if err := g.Apply(spec, 1); err != nil {
			t.Fatal(err)
		}
		const n = 200
		for i := range n {
			resp, _ := do(t, "GET", g.URL+"/page", nil)
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Set-Cookie"), "sid=") {
				t.Fatalf("session %d: %d, Set-Cookie %q", i, resp.StatusCode, resp.Header.Get("Set-Cookie"))
			}
		}
		testrun.Eventually(t, "an exposure per session", func() bool {
			sink.mu.Lock()
			defer sink.mu.Unlock()
			return len(sink.list) == n
		})
		base, canaryStats := delta(t, g, "web")
		if got := base.Requests + canaryStats.Requests; got != 2 {
			t.Errorf("canary window recorded %d requests, want 2 (the upstream exchanges, not the hits)", got)
		}
		if got := a.total.Load() + b.total.Load(); got != 2 {
			t.Errorf("%d upstream requests, want 2", got)
		}
		requests, hits := 0.0, 0.0
		for _, s := range g.samples(t, "dwara_requests_total", "dwara_cache_requests_total") {
			switch {
			case s.name == "dwara_requests_total":
				requests += s.value
			case s.labels["result"] == "hit":
				hits += s.value
			}
		}
		if requests != 2 || hits != n-2 {
			t.Errorf("dwara_requests_total %v (want 2), cache hits %v (want %d)", requests, hits, n-2)
		}
	})
}

// BenchmarkProxyCacheHit is BenchmarkProxy's request (a returning sticky
// session) on a 95/5 split with a cache, over endpoints whose answers are
// cacheable, every answer after the first a hit: the cost of answering
// from memory through the front, against BenchmarkProxy's forwarded one.
func BenchmarkProxyCacheHit(b *testing.B) {
	var addrs []string
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=3600")
			io.WriteString(w, "hello from a cacheable page\n")
		}))
		b.Cleanup(srv.Close)
		addrs = append(addrs, hostOf(srv.URL))
	}
	g := startGateway(b, *benchFront)
	g.apply(b, 1, fmt.Sprintf(`upstreams: [{name: stable, endpoints: [%q]}, {name: canary, endpoints: [%q]}]
services: [{name: web, split: {targets: [{upstream: stable, weight: 95}, {upstream: canary, weight: 5}]}, sticky: {cookie: sid}, cache: {max_bytes: 16777216}}]
`, addrs[0], addrs[1]))
	benchRequests(b, g.URL)
	hits := testutil.ToFloat64(g.cm.requests.WithLabelValues("web", "stable", "hit")) + testutil.ToFloat64(g.cm.requests.WithLabelValues("web", "canary", "hit"))
	if hits == 0 {
		b.Fatal("no hits")
	}
}

// TestMemoryConnReused: a memory answer's connection, closed by its
// front, is given back emptied and serves the next hit: a hit makes no
// Conn, reader or field slice of its own (only the Age value), and the
// next answer carries nothing of the one before.
func TestMemoryConnReused(t *testing.T) {
	now := time.Now()
	var ans cache.Answer
	ans.Reset()
	ans.Status = 200
	tc := &targetCache{branch: []byte("web/stable")}
	entry := func(body string, fields ...string) *cache.Entry {
		var fs []cache.Field
		for i := 0; i+1 < len(fields); i += 2 {
			fs = append(fs, cache.Field{Name: []byte(fields[i]), Value: []byte(fields[i+1])})
		}
		return cache.NewEntry(200, fs, []byte(body), &ans, "/", time.Hour, now, now)
	}
	a := entry("first body", "Content-Type", "text/plain", "X-One", "1", "X-Two", "2")
	b := entry("second", "X-Other", "o")

	c := memoryConn(a, now, false, tc)
	got, err := io.ReadAll(c.AnswerStream())
	if err != nil || string(got) != "first body" || len(c.Head.First("X-One")) == 0 {
		t.Fatalf("first answer: %q, %v, X-One %q", got, err, c.Head.First("X-One"))
	}
	c.Net.Close()
	c2 := memoryConn(b, now, false, tc)
	got, err = io.ReadAll(c2.AnswerStream())
	if err != nil || string(got) != "second" {
		t.Fatalf("second answer: %q, %v", got, err)
	}
	if v := c2.Head.First("X-One"); v != nil {
		t.Fatalf("the second answer carries the first's X-One %q", v)
	}
	if v := string(c2.Head.First("X-Dwara-Branch")); v != "web/stable" || !c2.Head.Close {
		t.Fatalf("second answer: X-Dwara-Branch %q, Close %v", v, c2.Head.Close)
	}
	c2.Net.Close()

	if raceEnabled {
		return // sync.Pool drops items at random under the race detector
	}
	allocs := testing.AllocsPerRun(200, func() {
		c := memoryConn(a, now, false, tc)
		_, _ = io.Copy(io.Discard, c.AnswerStream())
		c.Net.Close()
	})
	if allocs > 0 {
		t.Errorf("a memory answer allocates %v times; want none (its Age value is in its Conn)", allocs)
	}
}

// TestCacheHitAllocatesNothing: a hit through the fasthttp front, on a
// keep-alive connection, allocates nothing in the gateway: no key, no
// exchange, no Age value, no Conn. It counts the process's allocations
// over hits sent from a raw connection that allocates none of its own;
// not parallel, so no other test allocates meanwhile (a background
// allocation here and there stays far below one a hit).
func TestCacheHitAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector; make test runs this test without it too")
	}
	for _, front := range fastFronts {
		t.Run(front, func(t *testing.T) {
			g := cachingGateway(t, front, nil, false, "{max_bytes: 1048576}", startBranch(t, "stable"))
			c, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(wait))
			req := []byte("GET /page HTTP/1.1\r\nHost: web\r\n\r\n")
			br := bufio.NewReaderSize(c, 4096)
			body := make([]byte, 256)
			var cached []byte // the X-Cache value of the last answer
			hit := func() {
				if _, err := c.Write(req); err != nil {
					t.Fatal(err)
				}
				n := -1
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						t.Fatal(err)
					}
					if len(line) <= 2 {
						break
					}
					if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
						n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
					}
					if v, ok := bytes.CutPrefix(line, []byte("X-Cache: ")); ok {
						cached = append(cached[:0], bytes.TrimSpace(v)...)
					}
				}
				if n < 0 || n > len(body) {
					t.Fatalf("answer with Content-Length %d", n)
				}
				if _, err := io.ReadFull(br, body[:n]); err != nil {
					t.Fatal(err)
				}
			}
			for range 100 { // the miss, then hits until every pool is warm
				hit()
			}
			if string(cached) != "HIT" {
				t.Fatalf("X-Cache %q after 100 requests, want HIT", cached)
			}
			const hits = 2000
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range hits {
				hit()
			}
			runtime.ReadMemStats(&after)
			if string(cached) != "HIT" {
				t.Fatalf("X-Cache %q, want HIT", cached)
			}
			if per := float64(after.Mallocs-before.Mallocs) / hits; per >= 0.5 {
				t.Errorf("%.2f allocations a hit in the gateway; want none", per)
			}
		})
	}
}
