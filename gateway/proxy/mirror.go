package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/split"
)

// Mirroring (shadow traffic): a service with `mirror` also sends a share of
// its requests to another upstream, and drops the answers.
//
// The choice is the request key's (the sticky handle, minted or sent, else
// the request id): FNV-1a 64 of the key, as the split hashes it, xored with
// a salt and mixed by a 64-bit finalizer (so that its low digits do not
// follow the split's `hash % total`), modulo 10000, below percent x 100.
// The same key is therefore mirrored or not in every request and every
// gateway, whichever branch serves it.
//
// The real request is forwarded as before. On the request's goroutine, a
// chosen request whose body has a known length within max_body_bytes has
// that body read once into a pooled buffer, which the real request then
// reads instead of the client's stream, so the endpoint receives the same
// bytes; its head is written for the mirror's endpoint (the real head's
// rules, X-Dwara-Upstream naming the mirror upstream, plus X-Dwara-Mirror:
// 1, the same X-Request-Id); and the copy is queued, without waiting, on
// a bounded queue (mirrorQueueSize), or dropped when it is full. A body of
// unknown length (chunked) or over the cap is not buffered: the request is
// not mirrored (outcome body_too_large), so the real request streams as it
// always did. Upgrade requests are never mirrored.
//
// mirrorWorkers goroutines per Proxy, started with the first generation
// that has a mirror and stopped by Close, send the copies: the endpoint is
// the mirror upstream's balancer's Pick (the rotation of round_robin moves
// with mirrored requests too; least_conn and peak_ewma see only real
// traffic, since a copy never begins or ends an exchange on an endpoint's
// state), the connection one of the mirror upstream's own pools, the wait
// for the answer header bounded by the upstream's response_header_timeout_ms
// and the whole exchange by mirrorTotalTimeout; the answer is read to its
// end and dropped. Copies are never retried (but a dead pooled connection
// is replaced once, as for real requests), never reported to the passive
// checks, and never counted in dwara_requests_total: only in
// dwara_mirror_requests_total{service,upstream,outcome}.

// Sizes and bounds of mirroring.
const (
	mirrorQueueSize    = 1024
	mirrorWorkers      = 8
	mirrorTotalTimeout = 10 * time.Second
	// mirrorSalt separates the mirror's choice from the split's.
	mirrorSalt = 0x6d6972726f72215f // "mirror!_"
	// mirrorScale is the resolution of the mirrored share: percent x 100
	// out of 10000.
	mirrorScale = 10000
)

// Outcomes of dwara_mirror_requests_total.
const (
	mirrorSent         = "sent"
	mirrorFailed       = "failed"
	mirrorTimeout      = "timeout"
	mirrorDropped      = "dropped"
	mirrorBodyTooLarge = "body_too_large"
)

// mirror is a compiled config.Mirror of one service, shared by the
// service's targets.
type mirror struct {
	up *upstream
	// threshold is percent x 100: a key whose mirrorHash % 10000 is below
	// it is mirrored.
	threshold uint64
	maxBody   int64
	// cookie is the service's sticky cookie name; "" when not sticky.
	cookie string
	// hdrUpstream is the X-Dwara-Upstream of a copy: the mirror upstream.
	hdrUpstream []string
	*mirrorMetrics
}

// mirrorMetrics are the dwara_mirror_requests_total children of one
// (service, mirror upstream) pair, kept across generations while the pair
// exists.
type mirrorMetrics struct {
	service, upstream                            string
	sent, failed, timeout, dropped, bodyTooLarge prometheus.Counter
}

// mirrorRunner is a Proxy's mirroring machinery: the queue, the workers,
// and the metric children by pair.
type mirrorRunner struct {
	once   sync.Once
	q      chan *mirrorJob
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	// children by "service upstream"; guarded by the Proxy's applyMu.
	children map[string]*mirrorMetrics
}

// compileMirror compiles the mirror of service s of table t (under
// applyMu) and starts the workers if they are not running.
func (p *Proxy) compileMirror(s config.Service, t *Table) (*mirror, error) {
	m := s.Mirror
	u, ok := t.upstreams[m.Upstream]
	if !ok {
		return nil, errors.New("unknown mirror upstream " + m.Upstream)
	}
	if !(m.Percent > 0 && m.Percent <= 100) || m.MaxBodyBytes < 0 {
		return nil, errors.New("mirror percent or max_body_bytes out of range")
	}
	cm := &mirror{
		up:            u,
		threshold:     uint64(math.Round(m.Percent * 100)),
		maxBody:       int64(m.MaxBodyBytes),
		hdrUpstream:   oneValue(u.name),
		mirrorMetrics: p.mirrorMetrics(s.Name, u.name),
	}
	if s.Sticky != nil {
		cm.cookie = s.Sticky.Cookie
	}
	p.mirrors.start(p)
	return cm, nil
}

// mirrorMetrics returns the children of (service, upstream), creating
// them on first use. Called under applyMu.
func (p *Proxy) mirrorMetrics(service, upstream string) *mirrorMetrics {
	r := &p.mirrors
	key := service + " " + upstream
	if mm := r.children[key]; mm != nil {
		return mm
	}
	if r.children == nil {
		r.children = make(map[string]*mirrorMetrics)
	}
	v := p.m.mirrors
	mm := &mirrorMetrics{
		service: service, upstream: upstream,
		sent:         v.WithLabelValues(service, upstream, mirrorSent),
		failed:       v.WithLabelValues(service, upstream, mirrorFailed),
		timeout:      v.WithLabelValues(service, upstream, mirrorTimeout),
		dropped:      v.WithLabelValues(service, upstream, mirrorDropped),
		bodyTooLarge: v.WithLabelValues(service, upstream, mirrorBodyTooLarge),
	}
	r.children[key] = mm
	return mm
}

// retainMirrorMetrics deletes the series of the (service, upstream) mirror
// pairs table t no longer has. Called under applyMu.
func (p *Proxy) retainMirrorMetrics(t *Table) {
	keep := make(map[*mirrorMetrics]bool)
	for _, svc := range t.services() {
		for _, tg := range svc.targets {
			if tg.Mirror != nil {
				keep[tg.Mirror.mirrorMetrics] = true
			}
		}
	}
	for key, mm := range p.mirrors.children {
		if !keep[mm] {
			delete(p.mirrors.children, key)
			p.m.mirrors.DeletePartialMatch(prometheus.Labels{"service": mm.service, "upstream": mm.upstream})
		}
	}
}

// start starts the workers once (unless the Proxy is closed).
func (r *mirrorRunner) start(p *Proxy) {
	if r.closed.Load() {
		return
	}
	r.once.Do(func() {
		r.q = make(chan *mirrorJob, mirrorQueueSize)
		r.ctx, r.cancel = context.WithCancel(context.Background())
		for range mirrorWorkers {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				for {
					select {
					case <-r.ctx.Done():
						return
					case j := <-r.q:
						p.sendMirror(r.ctx, j)
					}
				}
			}()
		}
	})
}

// stop ends the workers, cutting the copies in flight, and waits for them.
// Copies still queued are dropped uncounted. Called under applyMu.
func (r *mirrorRunner) stop() {
	r.closed.Store(true)
	r.once.Do(func() {}) // no start after this
	if r.cancel != nil {
		r.cancel()
		r.wg.Wait()
	}
}

// enqueue queues j without waiting, or counts it dropped.
func (r *mirrorRunner) enqueue(j *mirrorJob) {
	if r.q != nil && !r.closed.Load() {
		select {
		case r.q <- j:
			return
		default:
		}
	}
	j.m.dropped.Inc()
	j.release()
}

// full reports whether a copy would be dropped now (a hint that spares the
// work of one).
func (r *mirrorRunner) full() bool { return r.q == nil || len(r.q) == cap(r.q) }

// mirrorHash is the mirror's hash of a request key.
func mirrorHash(key string) uint64 {
	h := split.Hash(key) ^ mirrorSalt
	// The finalizer of MurmurHash3 (fmix64): every output bit depends on
	// every input bit.
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// chosen reports whether the request of key is mirrored.
func (m *mirror) chosen(key string) bool { return mirrorHash(key)%mirrorScale < m.threshold }

// key is the request's key as route worked it out: the sticky handle
// (minted now, in setCookie, or sent valid in cookies), else the request id.
func (m *mirror) key(setCookie string, cookies []string, rid string) string {
	if m.cookie == "" {
		return rid
	}
	if setCookie != "" {
		v := setCookie[len(m.cookie)+1:]
		if i := strings.IndexByte(v, ';'); i >= 0 {
			v = v[:i]
		}
		return v
	}
	if c, ok := affinity.ReadCookieLines(cookies, m.cookie); ok && affinity.Valid(c) {
		return c
	}
	return rid
}

// MirrorBuf is a request body read once for the real request and its
// copy: the real request reads it through Read, the copy sends b. It goes
// back to the pool when both are done with it.
type MirrorBuf struct {
	b    []byte
	off  int
	refs atomic.Int32
}

var mirrorBufs sync.Pool

func getMirrorBuf(n int) *MirrorBuf {
	mb, _ := mirrorBufs.Get().(*MirrorBuf)
	if mb == nil {
		mb = new(MirrorBuf)
	}
	if cap(mb.b) < n {
		mb.b = make([]byte, n, max(n, 4096))
	}
	mb.b, mb.off = mb.b[:n], 0
	return mb
}

// Read reads the body held, for the real request.
func (mb *MirrorBuf) Read(p []byte) (int, error) {
	if mb.off >= len(mb.b) {
		return 0, io.EOF
	}
	n := copy(p, mb.b[mb.off:])
	mb.off += n
	return n, nil
}

// Release lets go of one reference; nil is a no-op, so that a caller can
// defer the release of a copy that may not exist.
func (mb *MirrorBuf) Release() {
	if mb == nil || mb.refs.Add(-1) > 0 {
		return
	}
	if cap(mb.b) <= 1<<20 { // do not keep the rare huge ones
		mirrorBufs.Put(mb)
	}
}

// mirrorBody is a MirrorBuf as a request body: Close is the real
// request's release, done by the front instead.
type mirrorBody struct{ *MirrorBuf }

func (mirrorBody) Close() error { return nil }

// errBody replays the part of a body read before a failure, then the
// failure, so the real request meets it as it would have.
type errBody struct {
	r   io.Reader
	err error
}

func (b *errBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = b.err
	}
	return n, err
}

func (b *errBody) Close() error { return nil }

// mirrorJob is one copy on its way: the endpoint, the request head written
// for it, and the body.
type mirrorJob struct {
	m    *mirror
	ep   *Endpoint
	head bytes.Buffer
	bw   *bufio.Writer
	body *MirrorBuf // nil: no body
	// isHead: the copy is a HEAD (its answer has no body); replay: it may
	// be sent twice (a safe method without a body).
	isHead, replay bool
}

var mirrorJobs = sync.Pool{New: func() any {
	j := new(mirrorJob)
	j.bw = bufio.NewWriterSize(&j.head, 2048)
	return j
}}

func newMirrorJob(m *mirror, ep *Endpoint, head, replay bool) *mirrorJob {
	j := mirrorJobs.Get().(*mirrorJob)
	j.m, j.ep = m, ep
	j.head.Reset()
	j.bw.Reset(&j.head)
	j.isHead, j.replay = head, replay
	return j
}

func (j *mirrorJob) release() {
	j.body.Release()
	j.m, j.ep, j.body = nil, nil, nil
	if j.head.Cap() <= 64<<10 {
		mirrorJobs.Put(j)
	}
}

// MirrorTarget is the core's half of mirroring a request: whether the
// request q, routed by rt to a target that mirrors (rt.tg.mirror not nil),
// is copied, and to which endpoint of the mirror's upstream. It returns
// nil, counting why, when it is not: not chosen by the mirror's share, an
// upgrade, a body of unknown length or over max_body_bytes, the queue
// full, no endpoint up. With a body it also returns the buffer to read it
// into (MirrorBuf.fill); the front then hands the copy over (QueueMirror).
func (p *Proxy) MirrorTarget(q *Request, rt Route) (*Endpoint, *MirrorBuf) {
	m := rt.Target.Mirror
	key := m.key(rt.SetCookie, q.Cookies, q.RequestID)
	if !m.chosen(key) || q.Upgrade != "" {
		return nil, nil
	}
	if q.Length < 0 || q.Length > m.maxBody {
		m.bodyTooLarge.Inc()
		return nil, nil
	}
	if p.mirrors.full() {
		m.dropped.Inc()
		return nil, nil
	}
	ep := p.mirrorEndpoint(m, key, q.ClientIP)
	if ep == nil || q.Length == 0 {
		return ep, nil
	}
	return ep, getMirrorBuf(int(q.Length))
}

// Fill reads the request's body from body into mb, for the copy and for
// the real request, which reads what it returns instead of body: mb itself
// (then shared, so released by both), or, when the body could not be read
// whole, what was read followed by the same failure (mb released: the
// request is not mirrored, and meets the failure as it would have without
// a mirror).
func (mb *MirrorBuf) Fill(body io.Reader) (rest io.ReadCloser, ok bool) {
	got, err := io.ReadFull(body, mb.b)
	if err != nil {
		if err == io.ErrUnexpectedEOF {
			err = io.EOF // the framing check is the forwarding path's
		}
		rest = &errBody{r: bytes.NewReader(bytes.Clone(mb.b[:got])), err: err}
		mb.refs.Store(1)
		mb.Release()
		return rest, false
	}
	mb.refs.Store(2)
	return mirrorBody{mb}, true
}

// CopyWhole copies b, a body the front holds whole already, into mb,
// which the copy then owns alone.
func (mb *MirrorBuf) CopyWhole(b []byte) {
	copy(mb.b, b)
	mb.refs.Store(1)
}

// QueueMirror queues the copy of the request q, routed by rt, for ep, with
// its body mb (nil: none), and returns the buffer the real request still
// reads (to release when it is done), or nil when the copy owns mb alone.
func (p *Proxy) QueueMirror(q *Request, rt Route, ep *Endpoint, mb *MirrorBuf) *MirrorBuf {
	m := rt.Target.Mirror
	j := newMirrorJob(m, ep, q.Method == "HEAD", safeMethod(q.Method) && mb == nil)
	j.body = mb
	q.writeHead(j.bw, ep.HostHeader, rt.Target, m)
	_ = j.bw.Flush()
	if mb != nil && mb.refs.Load() == 1 {
		mb = nil // the copy owns it alone
	}
	p.mirrors.enqueue(j)
	return mb
}

// mirrorEndpoint picks the endpoint of m's upstream for a copy of a
// request of key from clientIP, or counts the copy failed and returns nil
// when none is up. The affinity key is route's: the sticky handle, else
// the client address.
func (p *Proxy) mirrorEndpoint(m *mirror, key, clientIP string) *Endpoint {
	if m.cookie != "" {
		clientIP = key
	}
	ei := m.up.balancer.Pick(clientIP)
	if ei < 0 {
		m.failed.Inc()
		return nil
	}
	return m.up.endpoints[ei]
}

// sendMirror sends one copy and counts its outcome; it runs on a worker.
func (p *Proxy) sendMirror(base context.Context, j *mirrorJob) {
	defer j.release()
	ctx, cancel := context.WithTimeout(base, mirrorTotalTimeout)
	defer cancel()
	err := p.sendMirrorPooled(ctx, j)
	m := j.m
	switch {
	case err == nil:
		m.sent.Inc()
	case base.Err() != nil:
		// Close cut it: not the mirror's outcome.
	case errors.Is(err, ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded) || isNetTimeout(err):
		m.timeout.Inc()
	default:
		m.failed.Inc()
	}
}

func isNetTimeout(err error) bool {
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}

// sendMirrorPooled sends a copy on the mirror endpoint's connection pool:
// the head and body, then the answer header within the response-header
// timeout, then the answer's body, read and dropped, all within ctx's
// deadline. Nil means an answer came.
func (p *Proxy) sendMirrorPooled(ctx context.Context, j *mirrorJob) error {
	deadline, _ := ctx.Deadline()
	x, err := p.roundTrip(ctx, j.ep, nil, func(c *Conn, ep *Endpoint, _ *Target) (bool, error) {
		_ = c.Net.SetWriteDeadline(deadline)
		c.Writer.Write(j.head.Bytes())
		if j.body != nil {
			c.Writer.Write(j.body.b)
		}
		if err := c.Writer.Flush(); err != nil {
			return false, err
		}
		rd := deadline
		if d := ep.Pool.ResponseHeaderTimeout(); d > 0 && time.Now().Add(d).Before(rd) {
			rd = time.Now().Add(d)
		}
		c.SetReadDeadline(rd)
		if _, err := c.Reader.Peek(1); err != nil {
			if isNetTimeout(err) {
				return false, ErrUpstreamTimeout
			}
			return false, StaleError{err}
		}
		if err := c.ReadAnswer(ep.Pool.Watch, j.isHead, false); err != nil {
			if isNetTimeout(err) {
				err = ErrUpstreamTimeout
			}
			return false, err
		}
		return false, nil
	}, j.replay)
	if err != nil {
		return err
	}
	c := x.Conn
	stop := context.AfterFunc(ctx, c.Cutter())
	c.SetReadDeadline(deadline)
	var rerr error
	if body := c.AnswerStream(); body != nil {
		buf := p.buffers.Get()
		_, rerr = io.CopyBuffer(io.Discard, body, buf)
		p.buffers.Put(buf)
	}
	if stop() && rerr == nil && !c.Head.Close {
		_ = c.Net.SetWriteDeadline(time.Time{})
		c.SetReadDeadline(time.Time{})
		j.ep.Pool.Put(c)
	} else {
		c.Net.Close()
	}
	return nil
}
