package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dwara/dwara/gateway/cache"
	"github.com/dwara/dwara/gateway/config"
)

// The response cache of a service with cache: (DESIGN.md section 11),
// wired into the forwarding core so that every front has it: a front
// routes and forwards a request as always, and ExchangeRetrying, for a
// target whose service caches, answers from the service's store instead
// of an endpoint when it can.
//
// The key holds the branch: the pick (or a match rule, or the override)
// chose the target before the lookup, a new sticky session's cookie
// minted first as on the uncached path, and the key is (that target's
// upstream, host, request target, the request's values of the answer's
// Vary fields and of vary_headers), so an answer of one branch is never
// served to a session of another, and a hit on a new session sets its
// cookie and records its exposure as any first request does.
//
// A hit is answered from memory through the same path as an endpoint's
// answer: the exchange's Conn is one of memory (memoryConn), whose head
// carries Age, X-Cache: HIT and X-Dwara-Branch, and whose body is the
// stored one; it reaches no endpoint, takes no part in the passive checks
// (AnsweredBy) and is not recorded in the canary window or in
// dwara_requests_total (Attempt.End), only in dwara_cache_requests_total.
// A miss is forwarded, and its answer, when storable (gateway/cache's
// Storable), is streamed to the client while it is copied into memory up
// to max_object_bytes (cacheFill, through the answer body's reader), and
// stored once its body has been read to its end. Concurrent misses of one
// key make one upstream request: the first leads a flight, the others
// wait for it (bounded by their context and the upstream's
// response-header timeout) and are then served from what it stored, or
// forwarded when it stored nothing. A stale entry with a validator is
// revalidated: the request goes with If-None-Match/If-Modified-Since, and
// a 304 refreshes the entry, which answers the client (REVALIDATED). A
// POST, PUT, PATCH or DELETE answered without an error invalidates the
// entries of its URL on every branch.

// X-Cache values, and the index of each in targetCache.results.
const (
	resultHit = iota
	resultMiss
	resultRevalidated
	resultBypass
	nResults
)

var resultNames = [nResults]string{"hit", "miss", "revalidated", "bypass"}

var (
	xCacheName  = []byte("X-Cache")
	xBranchName = []byte("X-Dwara-Branch")
	ageName     = []byte("Age")
	xCacheValue = [nResults][]byte{[]byte("HIT"), []byte("MISS"), []byte("REVALIDATED"), []byte("BYPASS")}
)

// serviceCache is a service's cache: its store, which outlives the
// generations that keep the service's cache settings and targets
// (sameCache), and what it was made for.
type serviceCache struct {
	name     string
	store    *cache.Store
	settings config.Cache
	// targets describes the service's targets and their endpoints; a
	// generation that changes it starts an empty store.
	targets string
	// branches are the targets' upstreams, whose entries an unsafe
	// method invalidates.
	branches []string
	// evictions is the service's dwara_cache_evictions_total child.
	evictions prometheus.Counter
}

// targetCache is a target's view of its service's cache, with the
// dwara_cache_requests_total children of the pair resolved.
type targetCache struct {
	svc     *serviceCache
	branch  []byte
	results [nResults]prometheus.Counter
}

// cacheMetrics are the cache's collectors: the counters, and a collector
// of the stores' sizes read at each scrape.
type cacheMetrics struct {
	requests  *prometheus.CounterVec
	evictions *prometheus.CounterVec
}

var (
	cacheBytesDesc = prometheus.NewDesc("dwara_cache_bytes",
		"Bytes the response cache of each service holds (answers' heads and bodies, keys and a fixed overhead each), bounded by its max_bytes.",
		[]string{"service"}, nil)
	cacheEntriesDesc = prometheus.NewDesc("dwara_cache_entries",
		"Entries the response cache of each service holds.",
		[]string{"service"}, nil)
)

func newCacheMetrics(reg prometheus.Registerer, p *Proxy) *cacheMetrics {
	m := &cacheMetrics{
		requests: counterVec("dwara_cache_requests_total",
			"Requests to a service with a response cache, by the branch (upstream) that the pick chose and the result: hit (answered from memory), miss (forwarded), revalidated (a stale entry refreshed by a 304), bypass (neither the request nor its answer cacheable).",
			"service", "upstream", "result"),
		evictions: counterVec("dwara_cache_evictions_total",
			"Entries evicted from a service's response cache to keep it within max_bytes.",
			"service"),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.evictions, cacheCollector{p})
	}
	return m
}

// cacheCollector reports dwara_cache_bytes and dwara_cache_entries of the
// services of the generation being served.
type cacheCollector struct{ p *Proxy }

func (c cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cacheBytesDesc
	ch <- cacheEntriesDesc
}

func (c cacheCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.p.table.Load()
	if t == nil {
		return
	}
	for name, sc := range t.caches {
		ch <- prometheus.MustNewConstMetric(cacheBytesDesc, prometheus.GaugeValue, float64(sc.store.Bytes()), name)
		ch <- prometheus.MustNewConstMetric(cacheEntriesDesc, prometheus.GaugeValue, float64(sc.store.Len()), name)
	}
}

// compileCache gives the targets of cs, compiled from s, the cache of s:
// the one of the generation served when its settings and targets are the
// same, else a new empty one. Called under applyMu.
func (p *Proxy) compileCache(s config.Service, cs *service, t *Table) error {
	if s.Cache == nil {
		return nil
	}
	var sig strings.Builder
	branches := make([]string, len(cs.targets))
	for i, tg := range cs.targets {
		branches[i] = tg.Up.name
		sig.WriteString(tg.Up.name)
		for _, ep := range tg.Up.endpoints {
			sig.WriteByte(' ')
			sig.WriteString(ep.Addr)
		}
		sig.WriteByte('\n')
	}
	sc := p.caches[s.Name]
	if sc == nil || !sc.settings.Equal(s.Cache) || sc.targets != sig.String() {
		sc = &serviceCache{name: s.Name, settings: *s.Cache, targets: sig.String(), branches: branches,
			evictions: p.cm.evictions.WithLabelValues(s.Name)}
		ev := sc.evictions
		var err error
		sc.store, err = cache.New(cache.Options{
			MaxBytes:       s.Cache.MaxBytes,
			MaxObjectBytes: s.Cache.ObjectBytes(),
			DefaultTTL:     time.Duration(s.Cache.DefaultTTLSeconds) * time.Second,
			VaryHeaders:    s.Cache.VaryHeaders,
			Now:            p.cacheClock,
			OnEvict:        ev.Inc,
		})
		if err != nil {
			return err
		}
	}
	if t.caches == nil {
		t.caches = map[string]*serviceCache{}
	}
	t.caches[s.Name] = sc
	for _, tg := range cs.targets {
		tc := &targetCache{svc: sc, branch: []byte(tg.Up.name)}
		for i, r := range resultNames {
			tc.results[i] = p.cm.requests.WithLabelValues(s.Name, tg.Up.name, r)
		}
		tg.cache = tc
	}
	return nil
}

// retainCaches closes the stores that table t, just swapped in, no longer
// uses and deletes their series. Called under applyMu.
func (p *Proxy) retainCaches(t *Table) {
	for name, sc := range p.caches {
		if t.caches[name] == sc {
			continue
		}
		sc.store.Close()
		if t.caches[name] == nil {
			p.cm.evictions.DeleteLabelValues(name)
			p.cm.requests.DeletePartialMatch(prometheus.Labels{"service": name})
		}
	}
	p.caches = t.caches
}

// PurgeCache empties the cache of service, or only its entries whose
// request path starts with pathPrefix when that is not "", and returns
// how many entries it removed; found is false when the generation served
// has no such service with a cache.
func (p *Proxy) PurgeCache(service, pathPrefix string) (removed int, found bool) {
	t := p.table.Load()
	if t == nil {
		return 0, false
	}
	sc := t.caches[service]
	if sc == nil {
		return 0, false
	}
	return sc.store.Purge(pathPrefix), true
}

// PurgeAllCaches empties the cache of every service of the generation
// served and returns how many entries it removed: what a process does when
// it may have missed purges (its listener or event stream reconnected).
func (p *Proxy) PurgeAllCaches() (removed int) {
	t := p.table.Load()
	if t == nil {
		return 0
	}
	for _, sc := range t.caches {
		removed += sc.store.Purge("")
	}
	return removed
}

// CacheStats are the figures of a service's cache in this process.
type CacheStats struct {
	// Entries and Bytes are what the store holds now (dwara_cache_entries,
	// dwara_cache_bytes); MaxBytes its bound.
	Entries  int
	Bytes    uint64
	MaxBytes int
	// Hits, Misses, Revalidated and Bypassed count the requests by result
	// on every branch since the process started caching the service
	// (dwara_cache_requests_total).
	Hits, Misses, Revalidated, Bypassed uint64
}

// CacheStats returns the figures of service's cache; found is false when
// the generation served has no such service with a cache.
func (p *Proxy) CacheStats(service string) (st CacheStats, found bool) {
	t := p.table.Load()
	if t == nil {
		return st, false
	}
	sc := t.caches[service]
	if sc == nil {
		return st, false
	}
	// otter counts writes it has not yet applied in neither figure: apply
	// them first, so that an entry just stored is in both.
	sc.store.CleanUp()
	st.Entries, st.Bytes, st.MaxBytes = sc.store.Len(), sc.store.Bytes(), sc.settings.MaxBytes
	for _, branch := range sc.branches {
		var counts [nResults]uint64
		for i, r := range resultNames {
			c, err := p.cm.requests.GetMetricWithLabelValues(service, branch, r)
			if err != nil {
				continue
			}
			var m dto.Metric
			if c.Write(&m) == nil && m.Counter != nil {
				counts[i] = uint64(m.Counter.GetValue())
			}
		}
		st.Hits += counts[resultHit]
		st.Misses += counts[resultMiss]
		st.Revalidated += counts[resultRevalidated]
		st.Bypassed += counts[resultBypass]
	}
	return st, true
}

// cacheExchange is the cache's part of one request's exchange (an
// Attempt's).
type cacheExchange struct {
	tc     *targetCache
	result int
	// hit: answered from memory, no endpoint took part.
	hit bool
	// flight is the flight this request leads, landed when its answer is
	// stored or at End.
	flight *cache.Flight
}

// end counts the request's result and lands its flight; it reports
// whether the request was a hit, whose exchange has no other
// bookkeeping.
func (cx *cacheExchange) end() bool {
	if cx.flight != nil {
		cx.flight.Land()
	}
	cx.tc.results[cx.result].Inc()
	return cx.hit
}

// serve answers a's request with e, fresh at now (a hit): no exchange, so
// the endpoint's in-flight count is given back.
func (cx *cacheExchange) serve(a *Attempt, e *cache.Entry, now time.Time, head bool) Exchange {
	cx.hit, cx.result = true, resultHit
	a.Endpoint.state.Done(a.began, false)
	return Exchange{Conn: memoryConn(e, now, head, cx.tc)}
}

// AnsweredBy records, for the passive checks, the answer with status code
// of the exchange a: Answered, but nothing for an answer from the cache.
func (p *Proxy) AnsweredBy(a *Attempt, code int) {
	if a.cx.hit {
		return
	}
	p.Answered(a.Target.Up, a.Endpoint, code)
}

// cachedExchange is ExchangeRetrying for a target whose service caches.
func (p *Proxy) cachedExchange(ctx context.Context, a *Attempt, req *Request, send sendFunc) (Exchange, error) {
	tc := a.Target.cache
	store := tc.svc.store
	a.cx = cacheExchange{tc: tc, result: resultBypass}
	cx := &a.cx
	var cr cache.Request
	cr.Reset(req.Method, req.Length != 0)
	pragma, hasCC := false, false
	for _, f := range req.fields {
		if strings.EqualFold(f.name, "Cache-Control") {
			hasCC = true
		}
		pragma = cr.Field(f.name, f.value) || pragma
	}
	if pragma && !hasCC {
		cr.CC.NoCache = true
	}
	if cache.Bypass(&cr) != "" || req.Upgrade != "" {
		x, err := p.exchangeRetrying(ctx, a, req, send)
		if err == nil && cache.Invalidates(req.Method, x.Conn.Head.Status) {
			for _, b := range tc.svc.branches {
				store.Invalidate(string(cache.Key(nil, b, req.Host, req.Target)))
			}
		}
		if err == nil {
			markAnswer(&x.Conn.Head, resultBypass, a.Target.cache)
		}
		return x, err
	}
	get := req.joined
	// A hit keeps no key: it looks the answer up by a key in kb (most
	// fit). Past a hit the keys are kept (a flight, the store), so they
	// are strings of their own.
	var kb [256]byte
	probe := UnsafeString(cache.Key(kb[:0], a.Target.Up.name, req.Host, req.Target))
	e, found := store.Lookup(probe, get)
	now := store.Now()
	use := cache.Forward // what e is good for: nothing when there is none
	if e != nil {
		use = cache.Decide(&cr, e, now)
	}
	if use == cache.Serve {
		return cx.serve(a, e, now, req.Method == "HEAD"), nil
	}
	// found is the probe, or a variant's key the store made. That one is
	// a string of its own already, but it is copied all the same: kept
	// as it is, it might alias kb for all the compiler knows, which would
	// move kb to the heap on every request.
	primary, key := strings.Clone(probe), ""
	if found == probe {
		key = primary
	} else {
		key = strings.Clone(found)
	}
	if e == nil && cr.Method == "GET" {
		f, leader := store.Lead(key)
		if leader {
			cx.flight = f
		} else if f.Wait(ctx, max(a.Endpoint.Pool.ResponseHeaderTimeout(), time.Second)) {
			led, _ := store.Lookup(primary, get)
			now = store.Now()
			if led != nil && cache.Decide(&cr, led, now) == cache.Serve {
				return cx.serve(a, led, now, req.Method == "HEAD"), nil
			}
			// The leader stored nothing usable: forwarded alone.
		}
	}
	var stale *cache.Entry
	if use == cache.Revalidate {
		stale = e
		if e.ETag != "" {
			req.AddField("If-None-Match", e.ETag)
		}
		if e.LastModified != "" {
			req.AddField("If-Modified-Since", e.LastModified)
		}
	}
	requested := now
	x, err := p.exchangeRetrying(ctx, a, req, send)
	if err != nil {
		if cx.flight != nil {
			cx.flight.Land()
		}
		return x, err
	}
	c := x.Conn
	head := &c.Head
	tc = a.Target.cache // the target that answered (failover)
	cx.tc = tc
	received := store.Now()
	if stale != nil && head.Status == 304 {
		if n := cache.Refreshed(stale, keptFields(head), requested, received, store.DefaultTTL()); n != nil {
			store.Replace(key, n)
			cx.result = resultRevalidated
			fromMemory(c, n, received, req.Method == "HEAD", resultRevalidated, tc)
			return x, nil
		}
	}
	cx.result = resultMiss
	if req.Method == "HEAD" {
		markAnswer(head, resultMiss, tc)
		return x, nil
	}
	var ans cache.Answer
	ans.Reset()
	ans.Status = head.Status
	for _, f := range head.Fields {
		ans.Field(UnsafeString(f.Name), UnsafeString(f.Value))
	}
	lifetime, why := cache.Storable(&cr, &ans, store.DefaultTTL())
	if why == "" && head.Framing == BodyLength && head.Length > int64(store.MaxObjectBytes()) {
		why = "over max_object_bytes"
	}
	if why != "" || stale != nil && head.Status == 304 {
		if cx.flight != nil {
			cx.flight.Land() // nothing to wait for: those waiting go their own way now
		}
		cx.result = resultBypass
		markAnswer(head, resultBypass, tc)
		return x, nil
	}
	fill := &cacheFill{
		store: store, flight: cx.flight, primary: primary,
		vary:  ans.Vary,
		entry: cache.NewEntry(head.Status, keptFields(head), nil, &ans, req.Path, lifetime, requested, received),
		max:   store.MaxObjectBytes(),
	}
	fill.values = snapshot(req, ans.Vary, tc.svc.settings.VaryHeaders)
	markAnswer(head, resultMiss, tc)
	switch {
	case head.Framing == bodyNone:
		fill.store1()
	case head.Framing == BodyLength && c.Reader.Buffered() >= int(head.Length):
		b, _ := c.Reader.Peek(int(head.Length))
		fill.buf = append(make([]byte, 0, len(b)), b...)
		fill.store1()
	default:
		if head.Framing == BodyLength {
			fill.buf = make([]byte, 0, head.Length) // no more than the bound holds
		}
		c.answer.fill = fill
	}
	return x, nil
}

// joined is the value of r's fields named name (lower case), their lines
// joined by commas: what a key varies by.
func (r *Request) joined(name string) string {
	var v string
	n := 0
	for _, f := range r.fields {
		if len(f.name) == len(name) && strings.EqualFold(f.name, name) {
			if n == 0 {
				v = f.value
			} else {
				v += "," + f.value
			}
			n++
		}
	}
	return v
}

// snapshot copies the values of the fields an answer is keyed by out of
// the request, whose strings may not outlive its handler.
func snapshot(r *Request, vary, configured []string) map[string]string {
	if len(vary) == 0 && len(configured) == 0 {
		return nil
	}
	m := make(map[string]string, len(vary)+len(configured))
	for _, n := range vary {
		m[n] = strings.Clone(r.joined(n))
	}
	for _, n := range configured {
		n = strings.ToLower(n)
		m[n] = strings.Clone(r.joined(n))
	}
	return m
}

// keptFields are the fields of head the cache stores (cache.KeepField,
// and none that a Connection line names), aliasing head's bytes.
func keptFields(head *AnswerHead) []cache.Field {
	out := make([]cache.Field, 0, len(head.Fields))
	for _, f := range head.Fields {
		if cache.KeepField(f.Name) && !head.Named(f.Name) {
			out = append(out, cache.Field{Name: f.Name, Value: f.Value})
		}
	}
	return out
}

// markAnswer takes any X-Cache and X-Dwara-Branch fields of the
// endpoint's out of head and adds the cache's own.
func markAnswer(head *AnswerHead, result int, tc *targetCache) {
	fields := head.Fields[:0]
	for _, f := range head.Fields {
		if !EqualFoldASCII(f.Name, "X-Cache") && !EqualFoldASCII(f.Name, "X-Dwara-Branch") {
			fields = append(fields, f)
		}
	}
	head.Fields = append(fields, AnswerField{Name: xCacheName, Value: xCacheValue[result]},
		AnswerField{Name: xBranchName, Value: tc.branch})
}

// fromMemory makes c's answer the entry e at now: its status, its fields
// (into c's own slice, so that the next answer parsed on c writes
// nothing of e's), Age, X-Cache with result and X-Dwara-Branch, and its
// body read from memory (none for a HEAD). c keeps its Close.
func fromMemory(c *Conn, e *cache.Entry, now time.Time, head bool, result int, tc *targetCache) {
	a := &c.Head
	a.Status, a.minor = e.Status, 1
	// room for e's fields, Age, X-Cache and X-Dwara-Branch at once
	if n := len(e.Fields) + 3; cap(a.Fields) < n {
		a.Fields = make([]AnswerField, 0, n)
	}
	a.Fields = a.Fields[:0]
	for _, f := range e.Fields {
		a.Fields = append(a.Fields, AnswerField{Name: f.Name, Value: f.Value})
	}
	a.Fields = append(a.Fields, AnswerField{Name: ageName, Value: cache.AppendAge(c.age[:0], e.Age(now))})
	markAnswer(a, result, tc)
	a.Trailers, a.conn = a.Trailers[:0], a.conn[:0]
	a.Length = int64(len(e.Body))
	a.Framing = BodyLength
	if head || e.Status == 204 || e.Status == 304 {
		a.Framing = bodyNone
	}
	c.answer = answerBody{framing: a.Framing, left: a.Length, mem: e.Body, inMemory: true}
}

// memoryConn is a connection of memory answering e at now: no endpoint
// behind it. When the front is done with it, it closes it (Close: every
// front closes a connection whose Head.Close is set), which gives it back
// for the next hit: so that a hit makes no Conn, reader and field slice
// of its own.
func memoryConn(e *cache.Entry, now time.Time, head bool, tc *targetCache) *Conn {
	c := memoryConns.Get().(*Conn)
	c.Head.Close = true
	fromMemory(c, e, now, head, resultHit, tc)
	return c
}

// memoryConns are the connections of memory answers not in use.
var memoryConns = sync.Pool{New: func() any {
	c := &Conn{Reader: bufio.NewReaderSize(eofReader{}, 16)}
	c.Net = memoryNet{c}
	return c
}}

// freeMemory gives c, a connection of memory its front has closed, back to
// memoryConns, emptied: nothing of it (its head, its body reader) may be
// used after. Its reader and its field slice's array stay with it.
func (c *Conn) freeMemory() {
	fields, r := c.Head.Fields[:0], c.Reader
	r.Reset(eofReader{})
	*c = Conn{Net: c.Net, Reader: r}
	c.Head.Fields = fields
	memoryConns.Put(c)
}

// eofReader is an empty reader: the connection reader of a memory answer.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// memoryNet is the net.Conn of a memory answer, c: there is no socket.
// Its Close gives c back (freeMemory); a front closes it once.
type memoryNet struct{ c *Conn }

func (memoryNet) Read([]byte) (int, error)         { return 0, io.EOF }
func (memoryNet) Write(b []byte) (int, error)      { return len(b), nil }
func (m memoryNet) Close() error                   { m.c.freeMemory(); return nil }
func (memoryNet) LocalAddr() net.Addr              { return memoryAddr{} }
func (memoryNet) RemoteAddr() net.Addr             { return memoryAddr{} }
func (memoryNet) SetDeadline(time.Time) error      { return nil }
func (memoryNet) SetReadDeadline(time.Time) error  { return nil }
func (memoryNet) SetWriteDeadline(time.Time) error { return nil }

type memoryAddr struct{}

func (memoryAddr) Network() string { return "memory" }
func (memoryAddr) String() string  { return "cache" }

// cacheFill copies an answer's body, as the client is sent it, into the
// entry stored once the body has been read to its end; a body longer than
// max, or cut, is not stored.
type cacheFill struct {
	store   *cache.Store
	flight  *cache.Flight
	primary string
	vary    []string
	values  map[string]string
	entry   *cache.Entry
	buf     []byte
	max     int
	done    bool
}

// add takes n more bytes of the body read (p), and whether the body
// ended with them (end) or reading it failed (failed).
func (f *cacheFill) add(p []byte, end, failed bool) {
	if f.done {
		return
	}
	if failed || len(f.buf)+len(p) > f.max {
		f.done = true
		f.buf = nil
		return
	}
	f.buf = append(f.buf, p...)
	if end {
		f.store1()
	}
}

// store1 stores the entry with the body read and lands the flight.
func (f *cacheFill) store1() {
	f.done = true
	e := f.entry
	e.Body = f.buf
	if cap(e.Body) > len(e.Body)+len(e.Body)/16 {
		// Grown by appends (a body of unknown length): kept at its size,
		// which is what the bound weighs.
		e.Body = append(make([]byte, 0, len(e.Body)), e.Body...)
	}
	if e.Body == nil {
		e.Body = []byte{}
	}
	f.buf = nil
	f.store.Put(f.primary, func(n string) string { return f.values[n] }, e, f.vary)
	if f.flight != nil {
		f.flight.Land()
	}
}

// readMemory is answerBody.Read for a body in memory.
func (b *answerBody) readMemory(p []byte) (int, error) {
	if len(b.mem) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.mem)
	b.mem = b.mem[n:]
	b.left -= int64(n)
	return n, nil
}

// tee gives the fill what a read of the body returned.
func (b *answerBody) tee(p []byte, err error) {
	end := err == io.EOF || b.framing == BodyLength && b.left == 0 && err == nil
	b.fill.add(p, end, err != nil && err != io.EOF)
}
