package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"syscall"
	"time"
)

// The forwarding path: Dwara's own HTTP/1.1 client to the endpoints, the
// one client of every front, over plain TCP or TLS (pool.go). A request is
// written straight onto a pooled persistent connection (request line,
// headers without the hop-by-hop ones, the X-Forwarded-* set, the body
// streamed as it arrives), the response header is read under the
// upstream's response-header timeout, and the body is streamed back to the
// client, flushed as it comes when its length is unknown or it is an event
// stream. No goroutine is started per request or per connection.
//
// An upgrade request (websockets) goes the same way, with Connection:
// Upgrade and its Upgrade field, and is not retried; a 101 answer
// switching to the protocol asked for is relayed on the client's
// connection, hijacked, as a tunnel (upgrade.go).

// statusClientGone is the status counted for a request whose client went
// away before it had the whole answer (nginx's 499).
const statusClientGone = 499

// aLongTimeAgo is a deadline in the past: setting it unblocks any pending
// read or write on a connection at once.
var aLongTimeAgo = time.Unix(1, 0)

// errUpstreamTimeout marks a response header that did not arrive within the
// upstream's response-header timeout, or a connect that did not finish
// within the connect timeout.
var errUpstreamTimeout = errors.New("upstream timeout")

// exchange is the outcome of sending one request upstream.
type exchange struct {
	conn   *upConn // its answer's head is conn.head
	reused bool
	// sent is true once any byte of the request body was read from the
	// client: from then on the request cannot be sent again.
	sent bool
	// written is true once any byte of the request was written to the
	// connection: from then on it may have reached the endpoint.
	written bool
}

// forward proxies r over the connection pools of u's endpoints, starting
// with a.ep, and writes the answer to w. A request that fails before any
// answer header is retried on another endpoint of u when the retry rules
// allow it (retry.go); a.ep is then the endpoint that served it. Every
// failure and every answer header is reported to the passive checks
// (passive.go). It returns the status code the client got, or 499 when the
// client went away before it had the whole answer.
//
// A client that goes away while an exchange waits (for the answer header,
// or in the middle of the answer) cuts that exchange's connection at once
// (a deadline in the past): the exchange then fails as the client's, not
// the endpoint's.
func (p *Proxy) forward(w *statusWriter, r *http.Request, tg *target, a *attempt) int {
	ctx := r.Context()
	u := tg.up
	dl, _ := w.ResponseWriter.(deadliner)
	if p.stall > 0 && dl != nil && hasBody(r) {
		// A request body that stalls ends the request; the deadline is
		// lifted once the exchange is over, so the server's own reads of
		// the connection (it notices a client that hangs up) never meet it.
		w.body = stallBody{r: r.Body, dl: dl, stall: p.stall}
		body := r.Body
		r.Body = &w.body
		defer func() { r.Body = body }()
	}
	q := &w.out
	// gone stops the watch of the client on the connection of the latest
	// exchange (one per connection tried, so one per request but for
	// retries); false: the client went away, and the connection is cut.
	var gone func() bool
	x, err := p.exchangeRetrying(ctx, u, a, q, func(c *upConn, ep *endpoint) (sent bool, err error) {
		if gone != nil {
			gone() // an earlier connection's, which failed
		}
		gone = context.AfterFunc(ctx, c.cutNow)
		return p.send(c, r, q, ep, tg)
	})
	if w.body.dl != nil {
		_ = dl.SetReadDeadline(time.Time{})
	}
	if err != nil {
		if gone != nil {
			gone()
		}
		return p.forwardError(w, r, a.ep, err)
	}
	ep := a.ep
	c := x.conn
	code := c.head.status
	p.answered(u, ep, code)
	if code == http.StatusSwitchingProtocols {
		return p.tunnel(w, r, ep, c, q.upgrade, gone)
	}
	reusable, clientGone := false, false
	defer func() { // also when copyResponse aborts the client connection
		if !gone() {
			reusable = false // the deadline was set: the connection is spoiled
		}
		if reusable {
			ep.pool.put(c)
		} else {
			c.nc.Close()
		}
	}()
	if p.stall > 0 && dl != nil {
		defer func() { _ = dl.SetWriteDeadline(time.Time{}) }() // the next request on the connection has none
	}
	reusable, clientGone = p.copyResponse(w, r, c, dl)
	if clientGone {
		return statusClientGone
	}
	return code
}

// sendFunc writes a request on c, a connection to ep, and reads the answer
// header (each front parses answers its own way); sent reports whether any
// of the request body was read from the client. A failure to read the
// client's body must come as a clientBodyError, a response-header timeout
// as errUpstreamTimeout, and nothing at all from the endpoint as a
// staleError (transmit does all three).
type sendFunc func(c *upConn, ep *endpoint) (sent bool, err error)

// exchangeRetrying is the seam both fronts forward through: it sends a
// request with send over the connection pools of u's endpoints, starting
// with a.ep, until an answer header arrives. A request that fails before
// any answer header is retried on another endpoint of u when the retry
// rules allow it (retry.go); a.ep is then the endpoint that answered, or
// the last one tried. Every transport failure is reported to the passive
// checks (passive.go); the caller reports the answer (answered) and owns
// x.conn on success. A failure while ctx is done is returned at once.
func (p *Proxy) exchangeRetrying(ctx context.Context, u *upstream, a *attempt, req *outbound, send sendFunc) (exchange, error) {
	x, err := p.roundTrip(ctx, a.ep, send, req.replayable())
	for err != nil {
		if ctx.Err() != nil {
			return x, err
		}
		if x.endpointFault(err) {
			p.transportFailed(u, a.ep, err)
		}
		next := p.retryTarget(req, u, a, x, err)
		if next == nil {
			return x, err
		}
		p.log.Warn("upstream request failed; retrying on another endpoint",
			"request_id", req.requestID, "service", req.service,
			"upstream", u.name, "endpoint", a.ep.addr, "next", next.addr, "err", err)
		a.moveTo(next)
		x, err = p.roundTrip(ctx, a.ep, send, req.replayable())
	}
	return x, nil
}

// roundTrip sends a request with send on a pooled connection of ep. A
// pooled connection that turns out dead before any byte of an answer (the
// endpoint closed it while idle, and the look at it when it was taken did
// not see it yet) is replaced once by a newly dialled one (not another
// pooled one, which may be as dead) when the request cannot have reached
// the endpoint (nothing of it was written, and nothing of its body read),
// or when replay (a safe method without a body) allows sending it twice.
//
// On failure the exchange says what happened: no connection (the connect
// failed), whether the connection was a pooled one, whether any of the
// request was written and whether the body was touched, which is what
// endpointFault and mayHaveArrived judge.
func (p *Proxy) roundTrip(ctx context.Context, ep *endpoint, send sendFunc, replay bool) (exchange, error) {
	for attempt := 0; ; attempt++ {
		var (
			c      *upConn
			reused bool
			err    error
		)
		if attempt == 0 {
			c, reused, err = ep.pool.get(ctx)
		} else {
			c, err = ep.pool.dial(ctx)
		}
		if err != nil {
			return exchange{}, dialError(err)
		}
		x := exchange{conn: c, reused: reused}
		before := c.written
		x.sent, err = send(c, ep)
		x.written = c.written > before
		if err == nil {
			return x, nil
		}
		c.nc.Close()
		if attempt == 0 && x.staleAgain(err, replay) && ctx.Err() == nil {
			continue
		}
		return x, err
	}
}

// staleAgain reports whether the failed exchange x, on a pooled
// connection the endpoint had closed (no byte of an answer), may be sent
// again on a new connection: nothing of its body was read, and nothing of
// it was written or replay allows it.
func (x exchange) staleAgain(err error, replay bool) bool {
	return x.reused && !x.sent && (!x.written || replay) && staleConn(err)
}

// endpointFault reports whether err, the failure of exchange x, counts
// against the endpoint for the passive checks: a refused or timed-out
// connect, a response-header timeout, a reset or an end of the connection
// before the answer header on a new connection, a malformed answer. A
// pooled connection the endpoint closed while it was idle does not count
// (closing idle connections is what endpoints do), nor does a failure to
// read the client's request body. The caller has ruled out the client
// going away.
func (x exchange) endpointFault(err error) bool {
	if _, ok := errors.AsType[clientBodyError](err); ok {
		return false
	}
	if errors.Is(err, errUpstreamTimeout) || x.conn == nil {
		return true
	}
	return !(x.reused && staleConn(err))
}

// mayHaveArrived reports whether the request of the failed exchange x may
// have reached the endpoint: any byte of it was written to a connection
// (whatever came back: a written request that meets a closed connection
// may have been read before the close). Such a request is retried only
// when it is safe to send twice (retry.go).
func (x exchange) mayHaveArrived() bool {
	return x.conn != nil && (x.written || x.sent)
}

// send writes r, whose view is q, on c and reads the answer header into
// c.head under the response header timeout (a 101 only for an upgrade).
// sent reports whether the request body was touched.
func (p *Proxy) send(c *upConn, r *http.Request, q *outbound, ep *endpoint, tg *target) (sent bool, err error) {
	writeHead(c.bw, q, ep.hostHeader, tg, nil)
	var body io.Reader
	length := int64(0)
	if hasBody(r) {
		body, length = r.Body, r.ContentLength
	}
	sent, err = p.transmit(c, ep, body, length, func(bw *bufio.Writer) {
		for k, vv := range r.Trailer {
			for _, v := range vv {
				writeField(bw, k, v)
			}
		}
		bw.WriteString("\r\n")
	})
	if err != nil {
		return sent, err
	}
	// A 101 is taken only for an upgrade (forward relays it, tunnel).
	if err = c.readAnswer(ep.pool.watch, r.Method == http.MethodHead, q.upgrade != ""); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = errUpstreamTimeout
		}
		return sent, err
	}
	// The header is in: a slow body streams for as long as it takes.
	c.setReadDeadline(time.Time{})
	return sent, nil
}

// hasBody reports whether r has a body to send.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// httpOutbound fills q, the core's view of r (outbound.go): the net/http
// front's translation of its request, which it routes (route) and
// forwards (writeHead) by. The client's X-Request-Id is replaced by a
// fresh one unless it is well-formed (requestID). The view's strings are
// r's own; reusing q's slices, it does not allocate once warmed up.
func httpOutbound(q *outbound, r *http.Request) {
	q.reset()
	q.requestID = requestID(r)
	q.method = r.Method
	q.target = r.RequestURI
	if q.target == "" || q.target[0] != '/' && q.target != "*" {
		q.target = r.URL.RequestURI() // absolute form: its path and query
	}
	q.host = r.Host
	q.path = r.URL.Path
	q.cookies = r.Header["Cookie"]
	for k, vv := range r.Header {
		for _, v := range vv {
			q.addField(k, v)
		}
	}
	if hasBody(r) {
		q.length = r.ContentLength
		if q.length < 0 {
			q.length = -1
			for k := range r.Trailer {
				q.trailers = append(q.trailers, k)
			}
		}
	}
	q.clientIP = clientIP(r)
	q.tls = r.TLS != nil
	if isUpgrade(r) {
		q.upgrade = r.Header.Get("Upgrade")
	}
}

// transmit sends a request whose head the caller has written to c.bw: the
// body from body (none when nil), then flushes and waits, under ep's
// response-header timeout, for the first byte of an answer. Nothing at all
// from the endpoint is a staleError (from a pooled connection: one the
// endpoint closed while it was idle, so the request never reached it),
// the timeout errUpstreamTimeout. sent reports whether the body was
// touched. On success the read deadline is still set: the caller reads the
// answer header under it and clears it.
func (p *Proxy) transmit(c *upConn, ep *endpoint, body io.Reader, length int64, trailer func(*bufio.Writer)) (sent bool, err error) {
	if sent, err = p.writeRest(c, body, length, trailer); err != nil {
		return sent, err
	}
	// Always set: a pooled connection may keep the deadline of its last
	// answer (fastSend leaves it when the body was buffered).
	var end time.Time
	if d := ep.pool.responseHeaderTimeout(); d > 0 {
		end = time.Now().Add(d)
	}
	c.setReadDeadline(end)
	if _, err := c.br.Peek(1); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return sent, errUpstreamTimeout
		}
		return sent, staleError{err}
	}
	return sent, nil
}

// writeRest sends the rest of a request whose head the caller has
// written to c.bw: the body from body (none when nil), then flushes. sent
// reports whether the body was touched.
func (p *Proxy) writeRest(c *upConn, body io.Reader, length int64, trailer func(*bufio.Writer)) (sent bool, err error) {
	if body != nil {
		sent = true
		if err := p.writeBody(c, body, length, trailer); err != nil {
			return sent, err
		}
	}
	return sent, c.bw.Flush()
}

// writeBody streams a request body on c: as is when length is above 0,
// else (-1, an unknown length) chunked, ended by trailer, which writes the
// trailer fields and the final empty line. A failure to read the client's
// body is a clientBodyError.
func (p *Proxy) writeBody(c *upConn, r io.Reader, length int64, trailer func(*bufio.Writer)) error {
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	bw := c.bw
	// The reader lives in the connection, so taking its address does not
	// allocate.
	c.body = clientBody{r: r, left: length}
	defer func() { c.body = clientBody{} }()
	body := &c.body
	if length > 0 {
		n, err := io.CopyBuffer(bw, body, buf)
		if err == nil && n < length {
			err = clientBodyError{io.ErrUnexpectedEOF}
		}
		return body.blame(err)
	}
	cw := httputil.NewChunkedWriter(bw)
	if _, err := io.CopyBuffer(cw, body, buf); err != nil {
		return body.blame(err)
	}
	if err := cw.Close(); err != nil { // "0\r\n"
		return err
	}
	trailer(bw) // errors surface at Flush
	return nil
}

// clientBody reads a client's request body for writeBody, at most left
// bytes (no limit when left is -1, an unknown length), and remembers
// whether reading failed, so that the client's failure is not taken for
// the endpoint's.
type clientBody struct {
	r      io.Reader
	left   int64
	failed bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err != nil && err != io.EOF {
		b.failed = true
	}
	return n, err
}

// blame returns err as a clientBodyError when reading the client's body
// failed.
func (b *clientBody) blame(err error) error {
	if err != nil && b.failed {
		return clientBodyError{err}
	}
	return err
}

// clientBodyError is a failure to read the client's request body.
type clientBodyError struct{ err error }

func (e clientBodyError) Error() string { return "read request body: " + e.err.Error() }
func (e clientBodyError) Unwrap() error { return e.err }

// copyResponse writes the answer on c to the client: its head as
// copyAnswer copies it (with the endpoint's Content-Length, which the
// net/http server frames the body by), then its body, flushed as it
// arrives when it streams, then its trailers. It reports whether the
// upstream connection may be reused (the body was read to its end and the
// endpoint did not ask to close), and whether the client went away before
// the end.
//
// With a stall timeout and dl, the client connection's write deadline
// moves forward before every write: a client that reads nothing for the
// stall timeout is cut (counted 499), a slow stream that keeps moving
// never is.
func (p *Proxy) copyResponse(w *statusWriter, r *http.Request, c *upConn, dl deadliner) (reusable, clientGone bool) {
	a := &c.head
	h := w.Header()
	// One slice holds every value copied (the Content-Length and the
	// request id too).
	w.values = make([]string, 0, len(a.fields)+2)
	if a.length >= 0 && a.framing != bodyChunked {
		h["Content-Length"] = w.value(formatLength(a.length))
	}
	copyAnswer(a, (*stdAnswer)(w), w.out.requestID)
	body := c.answerStream()
	if body == nil {
		return !a.close, false
	}
	flush := a.framing != bodyLength || isEventStream(h)
	buf := p.buffers.Get()
	defer p.buffers.Put(buf)
	if p.stall <= 0 {
		dl = nil
	}
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if dl != nil {
				_ = dl.SetWriteDeadline(time.Now().Add(p.stall))
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false, true
			}
			if flush {
				w.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil && r.Context().Err() != nil {
			// The client went away (which also broke off the upstream read).
			return false, true
		}
		if rerr != nil {
			// The answer is cut: tell the client by aborting its
			// connection, as the standard reverse proxy does.
			p.log.Warn("upstream response cut", "request_id", r.Header.Get("X-Request-Id"),
				"service", r.Header.Get("X-Dwara-Service"), "upstream", r.Header.Get("X-Dwara-Upstream"), "err", rerr)
			panic(http.ErrAbortHandler)
		}
	}
	for _, f := range a.trailers {
		k := http.TrailerPrefix + http.CanonicalHeaderKey(string(f.name))
		h[k] = append(h[k], string(f.value))
	}
	return !a.close, false
}

// stdAnswer is the answerSink of the net/http front: the header of its
// answer, written at the status.
type stdAnswer statusWriter

func (o *stdAnswer) field(name, value []byte) {
	o.add(answerKey(name), string(value))
}

func (o *stdAnswer) trailer(value []byte) { o.add("Trailer", string(value)) }

func (o *stdAnswer) end(code int, rid string) {
	if rid != "" {
		o.add("X-Request-Id", rid)
	}
	(*statusWriter)(o).WriteHeader(code)
}

// add adds v to the values of k, after any the front set (the sticky
// session's Set-Cookie), never into a slice it shares.
func (o *stdAnswer) add(k, v string) {
	h := o.ResponseWriter.Header()
	if old := h[k]; len(old) > 0 {
		h[k] = append(old[:len(old):len(old)], v)
		return
	}
	h[k] = (*statusWriter)(o).value(v)
}

// value returns v as a field's values, in w.values while it has room.
func (w *statusWriter) value(v string) []string {
	if len(w.values) == cap(w.values) {
		return []string{v}
	}
	w.values = append(w.values, v)
	n := len(w.values)
	return w.values[n-1 : n : n]
}

// answerKey is the net/http header key of an answer's field name: the
// canonical form, without allocating for the common fields.
func answerKey(name []byte) string {
	if k, ok := commonAnswerKeys[string(name)]; ok {
		return k
	}
	return http.CanonicalHeaderKey(string(name))
}

// commonAnswerKeys maps the common answer field names, as endpoints
// write them, to their canonical keys.
var commonAnswerKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept-Ranges", "Age", "Cache-Control", "Content-Encoding", "Content-Language",
		"Content-Location", "Content-Range", "Content-Type", "Date", "Etag", "Expires", "Last-Modified",
		"Link", "Location", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Vary",
		"Www-Authenticate", "X-Content-Type-Options", "X-Request-Id", "Trailer"} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	m["ETag"] = "Etag"
	m["WWW-Authenticate"] = "Www-Authenticate"
	return m
}()

// isEventStream reports whether a response is a server-sent event stream.
func isEventStream(h http.Header) bool {
	ct := h["Content-Type"]
	return len(ct) > 0 && strings.HasPrefix(ct[0], "text/event-stream")
}

// forwardError answers a request whose exchange on ep failed before
// anything was written to the client, as exchangeFailure decides, and
// returns the status counted.
func (p *Proxy) forwardError(w http.ResponseWriter, r *http.Request, ep *endpoint, err error) int {
	h := r.Header
	f := p.exchangeFailure(err, func() bool { return r.Context().Err() != nil },
		h.Get("X-Request-Id"), h.Get("X-Dwara-Service"), h.Get("X-Dwara-Upstream"), ep.addr)
	if f.status == statusClientGone {
		return f.status
	}
	w.Header()["X-Request-Id"] = h["X-Request-Id"]
	if f.close {
		w.Header()["Connection"] = []string{"close"}
	}
	writeProblem(w, f.status, f.title, f.detail)
	return f.status
}

// dialError marks a connect timeout as errUpstreamTimeout.
func dialError(err error) error {
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return errors.Join(errUpstreamTimeout, err)
	}
	return err
}

// staleError is a connection that ended before the first byte of an
// answer.
type staleError struct{ err error }

func (e staleError) Error() string { return "connection closed before any answer: " + e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

// staleConn reports whether err is what a pooled connection that the
// endpoint closed while it was idle gives: no byte of an answer (end of
// file or a reset), or a broken pipe while writing the request.
func staleConn(err error) bool {
	if _, ok := errors.AsType[staleError](err); ok {
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// isUpgrade reports whether r asks to switch protocols (websockets), to
// another protocol than h2c (isH2CUpgrade: such a request is forwarded as
// a plain one).
func isUpgrade(r *http.Request) bool {
	up := r.Header["Upgrade"]
	return len(up) > 0 && namedIn(r.Header["Connection"], "Upgrade") && !isH2CUpgrade(up[0])
}
