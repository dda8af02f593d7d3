package fastfront

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dwara/dwara/gateway/proxy"

	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/api/apiv1"
)

// The fasthttp front: an alternative HTTP/1.1 server side for the same
// routing, pick and bookkeeping as ServeHTTP. It parses requests with
// fasthttp (the server must be NewServer's, or have its settings:
// StreamRequestBody, the ConnState hook), builds the same view (the
// method, and the path as it came, percent-decoded, so that route refuses
// what it refuses on the net/http front: CONNECT, TRACE, PRI, dot
// segments), calls route, and forwards over the same per-endpoint
// connection pools as the net/http front, so the upstream's connect,
// response-header and idle timeouts apply alike. The answer is read as
// on every front (answer.go) and streamed back to the client.
//
// Forwarding is shared with the net/http front through ExchangeRetrying
// (forward.go): the same pools, timeouts, retries and their budget
// (retry.go), and passive checks (passive.go). The bookkeeping is
// serveEndpoint's (fastExchange, ended by target.endRequest: in-flight
// counts, retry budget, dwara_requests_total, duration, and the canary
// recorder unless the client went away). What is the front's own: the
// answer head is copied into fasthttp's header (fastAnswer, so the answer
// streams through fasthttp without an http.Header per request), the
// bookkeeping ends when fasthttp closes the body stream instead of in a
// deferred function, and the wait for the answer header is cut in slices
// between which the client's connection is looked at (fastTransmit).
//
// Upgrade requests (websockets; fastupgrade.go) are routed as any other.
// The request head goes on a connection of the endpoint's pool, with the
// header rules of writeFastHead plus Connection: Upgrade and the client's
// Upgrade. An answer other than 101 is relayed as a normal response; a
// 101 switching to the protocol asked for is written on the client's
// connection, which fasthttp hands over once the handler has returned,
// and bytes are copied both ways until either side closes, then both are
// closed. As on the net/http front, upgrades are not retried, their
// failures count for the passive checks, and a tunnel is counted 101 when
// it ends, with its whole duration.
//
// https endpoints take the same path: their pools dial TLS (pool.go).
//
// A client that goes away while the endpoint has not answered yet is
// noticed within ClientCheckInterval: the wait for the answer header
// is cut in slices of that length (no extra work for an answer that comes
// within the first), and between two the client's socket is peeked at
// without reading (PeerGone: an end of file or a reset is a client
// gone, as for the net/http server; Linux and the BSDs only, elsewhere
// such a client is noticed at the response-header timeout). Such a
// request, and one whose client went away in the middle of its body, is
// counted 499, is not the endpoint's failure, is not retried, and its
// connection is closed without an answer.
//
// The client stall timeout (Options.ClientStallTimeout) applies as on the
// net/http front: a request body read under a deadline moved at each read
// (StallBody; 408 when it stalls), an answer written under fasthttp's
// per-answer write deadline, moved while a body streams (fastBody.Read;
// 499 when the client takes nothing). The access log (Options.AccessLog)
// gets the same line as from the net/http front, written when the
// exchange ends. A panic of the handler is recovered: logged, the request
// answered 502 and its connection closed (fastRecover); one while an
// answer is relayed or its exchange ends is logged and cuts that answer.
//
// What it does not do: HTTP/2 (node hands TLS connections that negotiate
// h2 to a net/http server of the same proxy). A client that goes away
// while an answer's body is relayed is noticed at the next write to it,
// so one whose endpoint sends nothing more of a body begun holds it until
// the endpoint does or the stall timeout passes. A TLS client's clean
// close (close_notify) is data to PeerGone, so before the answer only
// a reset shows such a client gone. fasthttp reads up to 8 KiB of a
// request body before the handler runs, under the request-head timeout:
// a client that goes away within those is no request (no count).
//
// Request framing: fasthttp refuses on its own (400, or 431 for a head
// over ReadBufferSize, connection closed) duplicate Content-Length fields,
// even equal ones, a Transfer-Encoding other than chunked when it has
// parsed one, invalid or overflowing chunk sizes and a space before a
// field's colon, and a request URI or Host its URI parser does not take.
// What it accepts but a proxy must not pass on (bare LF line ends,
// obsolete line folding, Transfer-Encoding with Content-Length, a field
// name that is not a token, a Host with userinfo, and the rest of
// head.go's list) fastRoute refuses with the validation every front
// shares (head.go), from the header block fasthttp keeps as it came. It
// accepts a bare LF ending the request line, which cannot be refused here
// because fasthttp keeps no copy of the request line; the request line is
// written anew upstream. Any HTTP
// version it serves as HTTP/1.0; ServeFastHTTP refuses all but 1.0 and 1.1
// (505).

// fastReadHeaderTimeout is how long the fasthttp front waits for a whole
// request head, as the net/http front's ReadHeaderTimeout.
const fastReadHeaderTimeout = 10 * time.Second

// NewServer returns a fasthttp server that serves p with the settings
// the fasthttp front relies on: request bodies streamed as they arrive, no
// default Server or Content-Type fields (the endpoint's pass through; Date
// is the gateway's), no multipart pre-parsing, problem+json answers to
// requests it cannot parse (fastErrorHandler), and the ConnState hook that
// ends the bookkeeping of an upgrade whose connection fasthttp closed
// instead of handing it over (a caller that sets its own ConnState must
// keep calling the one set here). idle bounds a keep-alive connection
// between requests; 0 means fasthttp's default (none).
func NewServer(p *proxy.Proxy, idle time.Duration) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      server{p}.ServeFastHTTP,
		Name:                         "dwara",
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		IdleTimeout:                  idle,
		// ReadTimeout bounds the request head from its first byte (from the
		// accept on a new connection), like net/http's ReadHeaderTimeout on
		// the other front; ServeFastHTTP lifts it for the body.
		ReadTimeout:    fastReadHeaderTimeout,
		ReadBufferSize: 16 << 10, // also the largest request head
		// The stall timeout bounds writing an answer: set before each
		// answer is written, moved forward while its body streams
		// (fastBody.Read).
		WriteTimeout: p.StallTimeout(),
		// An answer of up to 64 KiB goes out in one write, a longer one in
		// writes of 64 KiB as the endpoint connection's buffers read it
		// (proxy.ConnBufferSize). The write buffer is held only while an
		// answer is written (ReduceMemoryUsage): an idle keep-alive
		// connection keeps only its read buffer (which fasthttp keeps with
		// StreamRequestBody in any case). ReduceMemoryUsage also restarts
		// ReadTimeout at a new connection's first byte, which a
		// FirstHeadConn under each connection undoes (firsthead.go).
		WriteBufferSize:   proxy.ConnBufferSize,
		ReduceMemoryUsage: true,
		CloseOnShutdown:   true,
		// The handler reads the clock itself, once (ServeFastHTTP's start);
		// fasthttp's own reading for RequestCtx.Time, which nothing calls,
		// would be another 60 ns a request.
		LazyRequestTime: true,
		Logger:          p.ErrorLog(),
		ErrorHandler:    fastErrorHandler,
		ConnState:       fastConnState,
	}
}

// ServeFastHTTP routes and proxies one request parsed by fasthttp. It is
// the fasthttp counterpart of ServeHTTP and shares its routing and
// bookkeeping; see NewServer for the server it expects.
func (p server) ServeFastHTTP(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	requestBegins(ctx.Conn(), ctx.ConnRequestNum() == 1)
	// x holds what the request's view needs (its id among them) and
	// becomes its exchange when it is forwarded; the request id lives in
	// it, so it is used only while x is this request's.
	x := fastExchanges.Get().(*fastExchange)
	rid := fastRequestID(&ctx.Request.Header, &x.ridBuf)
	// A panic answers this request with 502 and closes its connection;
	// the bookkeeping of a forwarded request is balanced by
	// fastServeEndpoint's own deferred function, which runs first (and
	// leaves x, and so rid, to the garbage collector).
	defer p.fastRecover(ctx, rid)
	t := p.Current()
	if t == nil {
		ctx.Response.Header.Set("X-Request-Id", rid)
		fastProblem(ctx, http.StatusServiceUnavailable, "No generation loaded", "the gateway has not applied a configuration generation yet")
		x.recycle()
		return
	}
	if rt, ok := p.fastRoute(ctx, x, t, rid, start); ok {
		p.fastServe(ctx, x, rt, rid, start) // x is the exchange's from here
		return
	}
	x.recycle()
}

// fastRoute checks and routes the request, with x's buffers for what the
// routing needs of it. When the request is not to be forwarded it answers
// it (and writes its access log line) and reports false.
func (p server) fastRoute(ctx *fasthttp.RequestCtx, x *fastExchange, t *proxy.Table, rid string, start time.Time) (proxy.Route, bool) {
	h := &ctx.Request.Header
	refuse := func(status int, title, detail string, closeConn bool) (proxy.Route, bool) {
		if closeConn {
			ctx.SetConnectionClose()
		}
		ctx.Response.Header.Set("X-Request-Id", rid)
		if status == http.StatusMethodNotAllowed {
			ctx.Response.Header.Set("Allow", proxy.AllowedMethods[0])
		}
		fastProblem(ctx, status, title, detail)
		if p.AccessLog() != nil {
			p.LogAccess(fastAccessLine(ctx, rid), status, nil, nil, start)
		}
		return proxy.Route{}, false
	}
	f, why := proxy.CheckFields(h.RawHeaders())
	if why == "" {
		why = proxy.CheckTarget(h.Method(), h.RequestURI(), h.Protocol(), f)
	}
	if why != "" {
		// A head this front will not guess at (head.go): refuse it and end
		// the connection, since what follows on it cannot be trusted.
		return refuse(http.StatusBadRequest, "Bad request head", why, true)
	}
	if proto := proxy.UnsafeString(h.Protocol()); proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		// fasthttp serves any other version as HTTP/1.0; net/http refuses.
		return refuse(http.StatusHTTPVersionNotSupported, "HTTP version not supported", "this front speaks HTTP/1.0 and HTTP/1.1", true)
	}
	if cl := h.ContentLength(); (cl > 0 || cl == -1) && p.StallTimeout() <= 0 {
		// The server's ReadTimeout bounds the request head (see
		// NewServer); a body streams for as long as it takes, as on the
		// net/http front. With a stall timeout, each read of the body moves
		// the deadline instead (requestBody).
		_ = ctx.Conn().SetReadDeadline(time.Time{})
	}
	ip := clientIP(ctx.Conn(), x.ipBuf[:0])
	target := fastTarget(h)
	path, ok := fastRoutePath(target)
	if !ok && !h.IsConnect() { // CONNECT's authority-form: route refuses the method
		// As net/http refuses a target that url.ParseRequestURI does not
		// take, before any handler.
		return refuse(http.StatusBadRequest, "Bad request target", "the request target is not a path, or has a bad percent-escape", true)
	}
	q := &x.req
	fastOutbound(q, ctx, target, rid, ip)
	q.Path = path
	x.p, x.ctx, q.Body = p.Proxy, ctx, x
	rt := p.Route(t, q)
	if rt.Status != 0 {
		return refuse(rt.Status, rt.Title, rt.Detail, false)
	}
	if rt.Body != nil { // read by the route: sent instead of the client's
		ctx.Request.SetBodyStream(rt.Body, int(q.Length))
	}
	q.Service = rt.Target.HdrService[0]
	x.ip = ip
	return rt, true
}

// fastServe forwards a routed request, mirroring it first when its target
// mirrors; x becomes the request's exchange.
func (p server) fastServe(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route, rid string, start time.Time) {
	var upgrade []byte
	if x.req.Upgrade != "" {
		upgrade = ctx.Request.Header.Peek(fasthttp.HeaderUpgrade)
	}
	// x comes zeroed from the pool, but for the view's buffers.
	x.p, x.a, x.start, x.ctx = p.Proxy, rt.Begin(start), start, ctx
	if p.AccessLog() != nil {
		x.line = fastAccessLine(ctx, rid)
	}
	defer rt.Body.Release() // sent by then; nil when the route read none
	if rt.Target.Mirror != nil {
		defer p.mirrorFast(ctx, x, rt).Release()
	}
	p.fastServeEndpoint(ctx, x, rt, rid, x.ip, upgrade)
}

// fastRecover, deferred by ServeFastHTTP, turns a panic of the handler
// into a logged error and a 502 answer on a connection then closed (an
// answer begun cannot be, but the fasthttp front writes nothing before
// the handler returns).
func (p server) fastRecover(ctx *fasthttp.RequestCtx, rid string) {
	v := recover()
	if v == nil {
		return
	}
	p.LogPanic("panic serving a request", v, "request_id", rid)
	ctx.Response.Reset()
	ctx.SetConnectionClose()
	ctx.Response.Header.Set("X-Request-Id", rid)
	fastProblem(ctx, http.StatusBadGateway, "Gateway error", "the gateway failed while serving the request")
}

// fastAccessLine is the access log line's view of the request, copied out
// of fasthttp's buffers (which the next request reuses).
func fastAccessLine(ctx *fasthttp.RequestCtx, rid string) proxy.AccessLine {
	var ipBuf [64]byte
	path, _ := fastRoutePath(fastTarget(&ctx.Request.Header))
	return proxy.AccessLine{
		RequestID: strings.Clone(rid),
		Method:    string(ctx.Method()),
		Host:      string(ctx.Host()),
		Path:      strings.Clone(path),
		Client:    string(peerIP(ipBuf[:0], ctx.RemoteAddr())),
	}
}

// fastExchange is the bookkeeping of one proxied request on the fasthttp
// front, serveEndpoint's for this front. It is begun by fastServeEndpoint
// and finished exactly once: by the handler's defer, or, when the answer
// has a body to stream, by the body's CloseWithError after fasthttp has
// written it (or failed to).
//
// It is also the context.Context the forwarding path runs under (see Err).
type fastExchange struct {
	p     *proxy.Proxy
	a     proxy.Attempt // the target and endpoint serving the request, retries and failovers included
	start time.Time
	code  int
	// ctx is the request's, while the handler runs.
	ctx *fasthttp.RequestCtx
	// gone: the client went away before the answer header (fastTransmit).
	gone bool

	// conn is the connection the answer comes on, with its parsed head
	// (conn.head) and body reader.
	conn *proxy.Conn
	body io.Reader // the endpoint's body stream
	out  *fasthttp.ResponseHeader
	// remaining is what a Content-Length body still owes; -1 when the body
	// ends at its last chunk or at the end of the connection.
	remaining int64
	done      bool // the endpoint's body was read to its end
	cut       bool // reading the endpoint's body failed
	// relayed: some of the endpoint's body went to fasthttp already, so
	// a read of more moves the client's write deadline (fastBody.Read).
	relayed bool

	// req is the core's view of the request (fastOutbound), its slices
	// kept when the exchange is recycled.
	req proxy.Request
	// ridBuf holds the request id.
	ridBuf [128]byte
	// ipBuf holds the client's address, ip, here so that the view of the
	// request does not allocate.
	ipBuf [64]byte
	ip    []byte
	// line is the access log's view of the request; set only with an
	// access log.
	line proxy.AccessLine
	// StallBody reads the client's request body under the stall timeout.
	stallBody proxy.StallBody
	// tapped: something other than the forward reads the request body
	// (a mirror, a model alias's route) and hands the forward a reader of
	// its own: no splice (splicingBody), whatever that reader does.
	tapped bool
	splice splicingBody
}

var fastExchanges = sync.Pool{New: func() any { return new(fastExchange) }}

// fastServeEndpoint forwards the request to rt.ep and does the bookkeeping
// of serveEndpoint on x, begun by fastServe: finished in a defer unless
// the response body or an upgraded tunnel took it over. A request takes
// the forwarding path shared with the net/http front (ExchangeRetrying:
// the same pools, timeouts, retries and passive checks); an upgrade
// (upgrade is the client's Upgrade value, nil for any other request) is
// not retried and may become a tunnel (fastupgrade.go).
func (p server) fastServeEndpoint(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route, rid string, ip, upgrade []byte) {
	handedOver, completed := false, false
	defer func() {
		if handedOver {
			return
		}
		if !completed { // a panic: as serveEndpoint counts an aborted answer
			x.code = http.StatusBadGateway
			if x.gone {
				x.code = proxy.StatusClientGone
			}
			x.end(nil) // not recycled: fastRecover still logs its request id
			return
		}
		x.finish(nil)
	}()
	if rt.SetCookie != "" {
		ctx.Response.Header.Add(fasthttp.HeaderSetCookie, rt.SetCookie)
	}
	if upgrade != nil {
		handedOver = p.fastUpgrade(ctx, x, rt, rid, ip, upgrade)
	} else {
		handedOver = p.fastForward(ctx, x, rt, rid, ip)
	}
	completed = true
}

// fastForward forwards the request on the forwarding path and answers it,
// reporting whether the answer's body took the exchange over.
func (p server) fastForward(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route, rid string, ip []byte) bool {
	cl := ctx.Request.Header.ContentLength()
	xc, err := p.ExchangeRetrying(x, &x.a, &x.req, func(c *proxy.Conn, ep *proxy.Endpoint, tg *proxy.Target) (bool, error) {
		return p.fastSend(ctx, c, ep, x, tg, rid, ip, cl, nil)
	})
	if err != nil {
		x.releaseUp()
		rt.Target, rt.Endpoint = x.a.Target, x.a.Endpoint
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	x.conn = xc.Conn
	x.code = x.conn.Head.Status
	p.AnsweredBy(&x.a, x.code)
	return x.respond(ctx, rid)
}

// The forwarding path runs under the exchange as its context. Its Err
// reports the client gone once fastTransmit has seen it go, and the
// shared path (ExchangeRetrying, roundTrip) then gives up at once, without
// counting a failure against the endpoint or retrying. Its Done is nil:
// nothing closes when the client goes, since the client is only looked at,
// so Err may be non-nil while Done never closes, which the context
// contract does not foresee. That is safe here because the path waits on
// Done only while dialling (a TLS handshake included), and the client is
// looked at only after that; and a nil Done spares every dial the
// goroutine that context.WithDeadline starts to follow a parent it cannot
// see into (which would also read the exchange after it is recycled). The
// server's shutdown does not cancel a request: those in flight finish, as
// on the net/http front.

// Deadline reports no deadline.
func (x *fastExchange) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is nil: see above.
func (x *fastExchange) Done() <-chan struct{} { return nil }

// Err is context.Canceled once the client went away before the answer
// header, else nil.
func (x *fastExchange) Err() error {
	if x.gone {
		return context.Canceled
	}
	return nil
}

// Value is nil: the forwarding path carries no values.
func (x *fastExchange) Value(any) any { return nil }

// releaseUp lets go of the endpoint's answer body stream, if any (the
// answer's head and body reader live in its connection).
func (x *fastExchange) releaseUp() {
	x.body = nil
}

// finish ends the exchange: the connection goes back to the pool when its
// answer was read to the end and the endpoint keeps it open, and the
// endpoint state and metrics are updated. werr is the error that
// ended writing the answer to the client (nil: it all went out): an
// answer the endpoint cut is counted as 502 and is the endpoint's failure,
// one the client did not take to its end as 499 and is not, as in
// serveEndpoint.
func (x *fastExchange) finish(werr error) {
	x.end(werr)
	x.recycle()
}

// end is finish without giving x back to the pool.
func (x *fastExchange) end(werr error) {
	complete := x.done && werr == nil && !x.cut
	relayed := x.conn != nil
	if c := x.conn; c != nil {
		if complete && !c.Head.Close {
			x.a.Endpoint.Pool.Put(c)
		} else {
			c.Net.Close()
		}
	}
	x.releaseUp()
	code := x.code
	switch {
	case x.cut:
		code = http.StatusBadGateway
	case relayed && !complete:
		code = proxy.StatusClientGone
	}
	x.a.End(code, x.start)
	if x.p.AccessLog() != nil {
		x.p.LogAccess(x.line, code, x.a.Target, x.a.Endpoint, x.start)
	}
}

// recycle zeroes x and gives it back to the pool; nothing of it (the
// request id in ridBuf included) may be used after.
func (x *fastExchange) recycle() {
	req := x.req
	req.Reset()
	*x = fastExchange{req: req}
	fastExchanges.Put(x)
}

// fastSend is the fasthttp front's sendFunc: it writes the request on c,
// a connection to ep, through fastTransmit and reads the answer header
// into c.head (readAnswer). upgrade is the client's
// Upgrade value for an upgrade request (nil otherwise): only then is a 101
// answer taken.
func (p server) fastSend(ctx *fasthttp.RequestCtx, c *proxy.Conn, ep *proxy.Endpoint, x *fastExchange, tg *proxy.Target, rid string, ip []byte, cl int, upgrade []byte) (sent bool, err error) {
	x.releaseUp() // a failed earlier attempt's
	x.req.WriteHead(c.Writer, ep, tg)
	var body io.Reader
	if cl > 0 || cl == -1 {
		body = x.requestBody(ctx)
		if fc, ok := ctx.Conn().(*FirstHeadConn); ok && !x.tapped && ctx.RequestBodyStream() != nil {
			x.splice = splicingBody{r: body, fc: fc}
			body = &x.splice
		}
	}
	sent, err = p.fastTransmit(x, c, ep, body, int64(cl), func(bw *bufio.Writer) {
		// The client's trailers, read from its last chunk; the field block
		// ends with the empty line.
		bw.Write(ctx.Request.Header.TrailerHeader())
	})
	if err != nil {
		return sent, err
	}
	return sent, x.readAnswer(ctx, c, upgrade)
}

// readAnswer reads the endpoint's answer header on c, under the read
// deadline c has, into c.head (interim answers skipped, but a 101 to an
// upgrade: Conn.readAnswer), and leaves its body to stream through
// c.answer. upgrade is as for fastSend.
func (x *fastExchange) readAnswer(ctx *fasthttp.RequestCtx, c *proxy.Conn, upgrade []byte) error {
	err := c.ReadAnswer(x.a.Endpoint.Pool.Watch, ctx.Request.Header.IsHead(), upgrade != nil)
	if err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = proxy.ErrUpstreamTimeout
		}
		return err
	}
	c.HeadRead(upgrade != nil)
	return nil
}

// requestBody returns the client's request body as it is to be read: the
// stream fasthttp reads from the connection (or the body it holds), under
// the stall timeout when there is one.
func (x *fastExchange) requestBody(ctx *fasthttp.RequestCtx) io.Reader {
	body := ctx.RequestBodyStream()
	if body == nil {
		body = bytes.NewReader(ctx.Request.Body())
	}
	if x.p.StallTimeout() <= 0 {
		return body
	}
	x.stallBody = proxy.StallBody{R: body, DL: ctx, Stall: x.p.StallTimeout()}
	return &x.stallBody
}

// RequestBody is requestBody for a route that reads the body
// (proxy.BodySource).
func (x *fastExchange) RequestBody() io.Reader {
	x.tapped = true
	return x.requestBody(x.ctx)
}

// splicingBody is the client's request body as fasthttp streams it from
// a plain connection (a FirstHeadConn), read by nothing but the forward:
// a proxy.BodySplicer. Its reads that fasthttp makes from the connection
// straight into the caller's buffer (the bytes past those fasthttp holds)
// move the bytes to the endpoint's socket by splice instead
// (FirstHeadConn.armSplice): fasthttp counts them as read, and the
// caller writes none of them.
type splicingBody struct {
	r  io.Reader
	fc *FirstHeadConn
}

func (b *splicingBody) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *splicingBody) ReadOrSplice(p []byte, c *proxy.Conn) (int, bool, error) {
	b.fc.armSplice(c, p)
	n, err := b.r.Read(p)
	return n, b.fc.disarmSplice(), err
}

// ClientCheckInterval is how long the wait for an answer header goes
// on between two looks at the client's connection (fastTransmit).
const ClientCheckInterval = 500 * time.Millisecond

// errClientGone is a wait for an answer header given up because the
// client went away.
var errClientGone = errors.New("the client went away before the answer")

// fastTransmit is transmit with the wait for the answer's first byte cut
// in slices of ClientCheckInterval: between two, the client's
// connection is looked at (PeerGone), and a client gone ends the wait
// with errClientGone and x.gone set. The slices cost nothing more than
// transmit's one deadline while the answer comes within the first; when
// the whole head is not in yet at the end of a wait, the response-header
// deadline is set again for the rest of it. The client's body has been
// read to its end before the client is looked at, so the look never
// competes with a read of the body.
func (p server) fastTransmit(x *fastExchange, c *proxy.Conn, ep *proxy.Endpoint, body io.Reader, length int64, trailer func(*bufio.Writer)) (sent bool, err error) {
	if sent, err = p.SendBody(c, body, length, trailer); err != nil {
		return sent, err
	}
	d := ep.Pool.ResponseHeaderTimeout()
	now := time.Now()
	var end time.Time // the response-header deadline; zero: none
	if d > 0 {
		end = now.Add(d)
	}
	sliced := d <= 0 || d > ClientCheckInterval
	c.SetAnswerDeadline(now, waitStep(now, end, sliced))
	if err := c.FlushForAnswer(); err != nil {
		return sent, err
	}
	for {
		_, err := c.Reader.Peek(1)
		if err == nil {
			break
		}
		if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
			return sent, proxy.StaleError{Err: err}
		}
		now = time.Now()
		if !end.IsZero() && !now.Before(end) {
			return sent, proxy.ErrUpstreamTimeout
		}
		if proxy.PeerGone(x.ctx.Conn()) {
			x.gone = true
			return sent, errClientGone
		}
		c.SetAnswerDeadline(now, waitStep(now, end, sliced))
	}
	if sliced && !fastHeadBuffered(c.Reader) {
		c.SetReadDeadline(end)
	}
	return sent, nil
}

// waitStep is the read deadline of one slice of fastTransmit's wait from
// now: the response-header deadline end (zero: none), or when sliced, at
// most ClientCheckInterval away.
func waitStep(now, end time.Time, sliced bool) time.Time {
	if !sliced {
		return end
	}
	step := now.Add(ClientCheckInterval)
	if !end.IsZero() && end.Before(step) {
		step = end
	}
	return step
}

// fastHeadBuffered reports whether br holds a whole answer head that is
// not an interim one, so that parsing it reads nothing more.
func fastHeadBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	if len(b) < 13 || b[9] == '1' { // "HTTP/1.1 1xx": more heads follow
		return false
	}
	return proxy.AnswerHeadEnd(b) >= 0
}

// respond copies the endpoint's answer to the client: its header without
// the hop-by-hop fields, the request id unless the endpoint set one, and
// its body as a stream that finishes the exchange when fasthttp closes it.
// It reports whether the body took the exchange over.
func (x *fastExchange) respond(ctx *fasthttp.RequestCtx, rid string) bool {
	c := x.conn
	out := &ctx.Response.Header
	// The endpoint's field names go to the client as the endpoint wrote
	// them (as nginx and HAProxy pass them), not rewritten into
	// fasthttp's canonical case: a copy of each name fewer.
	out.DisableNormalizing()
	proxy.CopyAnswer(&c.Head, (*fastAnswer)(out), rid)
	body := c.AnswerStream()
	if body == nil { // HEAD, 204, 304: no body to stream
		if cl := c.Head.Length; cl >= 0 && ctx.IsHead() {
			out.SetContentLength(int(cl))
		}
		x.done = true
		return false
	}
	cl := c.Head.BodyLength()
	if cl >= 0 && cl <= copiedAnswer && c.BodyBuffered() {
		// The whole body is in the connection's buffer already (most small
		// answers): it is copied into the answer, and the exchange ends
		// with the handler, with no stream for fasthttp to read and close.
		// A larger one streams from that buffer instead, straight into
		// fasthttp's (fastBody.WriteTo): one copy, not two.
		b, _ := c.Reader.Peek(cl)
		ctx.Response.SetBody(b)
		_, _ = c.Reader.Discard(cl)
		x.done = true
		return false
	}
	x.body, x.out = body, out
	x.remaining = -1
	if cl >= 0 {
		x.remaining = int64(cl)
	} else {
		cl = -1 // chunked to the client, whatever the endpoint's framing
	}
	ctx.Response.SetBodyStream((*fastBody)(x), cl)
	return true
}

// copiedAnswer bounds the body of an answer that respond copies into
// fasthttp's answer when it has it whole: past it, a second copy of the
// body (into fasthttp's write buffer) costs more than the stream does.
const copiedAnswer = 8 << 10

// fastAnswer is the AnswerSink of the fasthttp front: the client's
// answer header.
type fastAnswer fasthttp.ResponseHeader

func (o *fastAnswer) Field(name, value []byte) {
	(*fasthttp.ResponseHeader)(o).AddBytesKV(name, value)
}

func (o *fastAnswer) Trailer(value []byte) {
	_ = (*fasthttp.ResponseHeader)(o).AddTrailerBytes(value)
}

func (o *fastAnswer) End(code int, rid string) {
	h := (*fasthttp.ResponseHeader)(o)
	if rid != "" {
		h.Set("X-Request-Id", rid)
	}
	h.SetStatusCode(code)
}

// fastBody is the endpoint's response body as fasthttp streams it to the
// client. fasthttp closes it once the answer is written or has failed;
// Close finishes the exchange.
type fastBody fastExchange

// With a stall timeout, the client connection's write deadline moves
// forward before the bytes a read returns are written, as on the net/http
// front, but only where it matters: fasthttp sets the deadline (its
// WriteTimeout, see NewServer) before it writes each answer, which
// covers a first read that returns at once, so a small answer costs no
// more; a read after the first, or one that may have waited on the
// endpoint, moves it. A client that takes nothing for the stall timeout
// is then cut (counted 499); a slow stream that keeps moving is not.
func (b *fastBody) Read(p []byte) (int, error) { return b.read(p, false) }

// read is Read; direct reads past the endpoint connection's buffer once
// it is empty (proxy.Conn.ReadAnswerDirect), for a body that allows it.
func (b *fastBody) read(p []byte, direct bool) (n int, err error) {
	defer func() {
		if b.p.LogPanic("panic relaying an answer", recover()) {
			b.cut = true
			n, err = 0, errRelayPanic
		}
	}()
	if b.remaining == 0 {
		b.done = true
		return 0, io.EOF
	}
	if b.remaining > 0 && int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	waited := b.relayed || b.conn == nil || b.conn.Reader.Buffered() == 0
	if direct {
		n, err = b.conn.ReadAnswerDirect(p)
	} else {
		n, err = b.body.Read(p)
	}
	if n > 0 {
		if waited {
			b.moveStall()
		}
		b.relayed = true
	}
	if err != nil && err != io.EOF {
		b.cut = true
	}
	b.count(int64(n), err)
	if err == io.EOF {
		if b.remaining > 0 {
			b.cut = true
			return n, io.ErrUnexpectedEOF
		}
		b.done = true
		b.copyTrailers()
	}
	return n, err
}

// moveStall moves the client connection's write deadline to the stall
// timeout from now, when there is one.
func (b *fastBody) moveStall() {
	if b.p.StallTimeout() > 0 {
		_ = b.ctx.SetWriteDeadline(time.Now().Add(b.p.StallTimeout()))
	}
}

// count takes n bytes relayed, which err came with, off what the body
// still owes.
func (b *fastBody) count(n int64, err error) {
	if b.remaining > 0 {
		b.remaining -= n
		if b.remaining == 0 && err == nil {
			b.done = true
		}
	}
}

// SupportsBodyWriteTo reports that fasthttp may write an answer of known
// length with WriteTo (fasthttp.BodyWriterTo): its bytes are the same as
// Read's. A body of unknown length is read with Read, so that fasthttp
// flushes each chunk as it comes (event streams).
func (b *fastBody) SupportsBodyWriteTo() bool { return b.remaining >= 0 }

// WriteTo writes the rest of the body to w (fasthttp's writer of a body
// of known length) through Read, a copy buffer (proxy.ConnBufferSize) at
// a time, each piece handed to the writer whole, which writes it straight
// to the socket once its own buffer is empty. fasthttp's own path reads
// into what is left of its write buffer instead, in more and smaller
// reads: 256 KiB answers cost about 12% more CPU that way.
//
// A body the endpoint connection can hand over directly
// (proxy.Conn.AnswerDirect) goes through fasthttp's ReadFrom instead, as
// a spliceBody: its buffer is filled straight from the endpoint's socket,
// and on a plain TCP client connection the rest goes by splice
// (FirstHeadConn.ReadFrom), with no copy through this process.
func (b *fastBody) WriteTo(w io.Writer) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok && b.conn != nil && b.conn.AnswerDirect() {
		return rf.ReadFrom((*spliceBody)(b))
	}
	return b.copyTo(w, false)
}

// copyTo writes the rest of the body to w through a copy buffer, read as
// read reads with direct.
func (b *fastBody) copyTo(w io.Writer, direct bool) (int64, error) {
	buf := b.p.Buffers().Get()
	defer b.p.Buffers().Put(buf)
	var total int64
	for {
		n, err := b.read(buf, direct)
		if n > 0 {
			m, werr := w.Write(buf[:n])
			total += int64(m)
			if werr != nil {
				return total, werr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// spliceBody is a fastBody that fasthttp's buffered writer takes with
// ReadFrom (fastBody.WriteTo, for a body proxy.Conn.AnswerDirect allows).
// The writer fills what is left of its buffer, after the answer's head,
// with Read, which reads straight from the endpoint's socket once the
// endpoint connection's buffer is empty; then it writes its buffer and
// hands the rest to the client connection's ReadFrom, which moves it
// with spliceTo.
type spliceBody fastBody

func (s *spliceBody) Read(p []byte) (int, error) { return (*fastBody)(s).read(p, true) }

// spliceTo moves up to n bytes of the body to c, the client's connection:
// from the endpoint's socket to c's by splice where both are plain TCP
// sockets (proxy.Conn.SpliceAnswer), else through a copy buffer. The
// bookkeeping is Read's: a failure on the endpoint's side cuts the
// answer (502), one on c's is the client's (499); the stall timeout moves
// ahead of each batch written.
func (s *spliceBody) spliceTo(c *FirstHeadConn, n int64) (moved int64, err error) {
	b := (*fastBody)(s)
	defer func() {
		if b.p.LogPanic("panic relaying an answer", recover()) {
			b.cut = true
			err = errRelayPanic
		}
	}()
	var stall func()
	if b.p.StallTimeout() > 0 {
		stall = b.moveStall
	}
	moved, endpoint, err := b.conn.SpliceAnswer(&c.sock, c.Conn, min(n, b.remaining), stall)
	if moved > 0 {
		b.relayed = true
	}
	b.count(moved, err)
	if endpoint {
		b.cut = true
	}
	if err == proxy.ErrNoSplice {
		var m int64
		m, err = b.copyTo(writerOnly{c}, true)
		moved += m
	}
	return moved, err
}

// writerOnly hides its writer's ReadFrom.
type writerOnly struct{ io.Writer }

// copyTrailers gives the client the endpoint's trailer values, also those
// the endpoint did not announce (the client's Trailer field is written
// already; the values still follow the last chunk).
func (b *fastBody) copyTrailers() {
	for _, f := range b.conn.Head.Trailers {
		if !slices.ContainsFunc(b.out.PeekTrailerKeys(), func(d []byte) bool { return bytes.EqualFold(d, f.Name) }) {
			if b.out.AddTrailerBytes(f.Name) != nil {
				continue
			}
		}
		b.out.AddBytesKV(f.Name, f.Value)
	}
}

// errRelayPanic ends an answer whose relaying panicked.
var errRelayPanic = errors.New("relaying the answer failed")

// CloseWithError is called by fasthttp with the error that ended the
// write (nil when the whole answer went out).
// A panic in finish (the access log's handler is the operator's code) is
// logged: it runs on fasthttp's goroutine, where nothing else recovers it.
func (b *fastBody) CloseWithError(err error) error {
	p := b.p // finish gives b back to the pool
	defer func() { p.LogPanic("panic ending a request", recover()) }()
	(*fastExchange)(b).finish(err)
	return nil
}

// fastForwardError answers a request whose exchange failed before anything
// was written to the client, as ExchangeFailure decides (the client gone:
// x.gone, or its connection found ended), and returns the status counted:
// for 499 the connection is closed without an answer.
func (p server) fastForwardError(ctx *fasthttp.RequestCtx, x *fastExchange, rt proxy.Route, rid string, err error) int {
	f := p.ExchangeFailure(err, func() bool {
		if !x.gone {
			x.gone = proxy.PeerGone(ctx.Conn())
		}
		return x.gone
	}, rid, rt.Target.HdrService[0], rt.Target.HdrUpstream[0], rt.Endpoint.Addr)
	if f.Status == proxy.StatusClientGone {
		fastHangUp(ctx)
		return f.Status
	}
	if f.Close {
		ctx.SetConnectionClose()
	}
	ctx.Response.Header.Set("X-Request-Id", rid)
	fastProblem(ctx, f.Status, f.Title, f.Detail)
	return f.Status
}

// fastHangUp closes the client's connection without an answer (nginx's
// 499): fasthttp hands it over to a hijack handler that does nothing, after
// which it closes it.
func fastHangUp(ctx *fasthttp.RequestCtx) {
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(net.Conn) {})
}

// fastProblem writes an RFC 9457 problem+json answer, as writeProblem.
func fastProblem(ctx *fasthttp.RequestCtx, status int, title, detail string) {
	ctx.Response.Header.SetContentType("application/problem+json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.SetStatusCode(status)
	ctx.Response.SetBodyString(proxy.ProblemJSON(status, title, detail))
}

// fastTarget returns the request target as it is forwarded: the client's,
// byte for byte, in origin form. An absolute-form target (RFC 9112 section
// 3.2.2: routed on its authority, which fasthttp's Host is then) loses its
// scheme and authority and keeps its path and query as they came, "/"
// standing for an empty path, as the net/http front forwards it.
func fastTarget(h *fasthttp.RequestHeader) []byte {
	u := h.RequestURI()
	if len(u) == 0 || u[0] == '/' || string(u) == "*" {
		return u
	}
	i := bytes.Index(u, []byte("://"))
	if i < 0 {
		return u // no scheme: fastRoutePath refuses it
	}
	rest := u[i+3:]
	j := bytes.IndexAny(rest, "/?")
	switch {
	case j < 0:
		return []byte{'/'}
	case rest[j] == '?':
		return append([]byte{'/'}, rest[j:]...)
	}
	return rest[j:]
}

// fastOutbound fills q, the core's view of the request of ctx
// (outbound.go), with its target as forwarded (fastTarget), request id
// rid and peer ip: the fasthttp front's translation of its request; the
// caller sets the routing path. The view's
// strings are ctx's own bytes; reusing q's slices, it does not allocate
// once warmed up.
func fastOutbound(q *proxy.Request, ctx *fasthttp.RequestCtx, target []byte, rid string, ip []byte) {
	h := &ctx.Request.Header
	q.Reset()
	q.Method = proxy.UnsafeString(h.Method())
	q.Target = proxy.UnsafeString(target)
	q.Host = proxy.UnsafeString(ctx.Host())
	if c := h.Peek(fasthttp.HeaderCookie); len(c) > 0 {
		q.CookieBuf[0] = proxy.UnsafeString(c)
		q.Cookies = q.CookieBuf[:]
	}
	for k, v := range h.All() {
		q.AddField(proxy.UnsafeString(k), proxy.UnsafeString(v))
	}
	switch cl := h.ContentLength(); {
	case cl > 0:
		q.Length = int64(cl)
	case cl == -1:
		q.Length = -1
		for _, k := range h.PeekTrailerKeys() {
			q.Trailers = append(q.Trailers, proxy.UnsafeString(k))
		}
	}
	q.ClientIP = proxy.UnsafeString(ip)
	q.TLS = ctx.IsTLS()
	if fastIsUpgrade(h) {
		q.Upgrade = proxy.UnsafeString(h.Peek(fasthttp.HeaderUpgrade))
	}
	q.RequestID = rid
}

// fastRoutePath returns the path a request with the target fastTarget
// returned is routed on, as the net/http front's r.URL.Path
// (url.ParseRequestURI's): the target up to a "?", percent-decoded, with
// its dot segments, repeated slashes and any "#" (fasthttp's ctx.Path()
// has none of them: it resolves the first two and drops what follows a
// "#"), so that route refuses the dot segments and matches the service on
// the path the endpoint gets. It reports false, as url.ParseRequestURI
// fails, for a target that is neither a path nor "*", or that has a "%"
// not followed by two hex digits. It allocates only to decode.
func fastRoutePath(target []byte) (string, bool) {
	raw, _, _ := bytes.Cut(target, []byte{'?'})
	if string(raw) == "*" {
		return "*", true
	}
	if len(raw) == 0 || raw[0] != '/' {
		return "", false
	}
	n := bytes.IndexByte(raw, '%')
	if n < 0 {
		return proxy.UnsafeString(raw), true
	}
	dst := make([]byte, n, len(raw))
	copy(dst, raw[:n])
	for i := n; i < len(raw); i++ {
		c := raw[i]
		if c == '%' {
			if i+2 >= len(raw) || !proxy.IsHex(raw[i+1]) || !proxy.IsHex(raw[i+2]) {
				return "", false
			}
			c = proxy.Unhex(raw[i+1])<<4 | proxy.Unhex(raw[i+2])
			i += 2
		}
		dst = append(dst, c)
	}
	return proxy.UnsafeString(dst), true
}

// fastErrorHandler answers a request fasthttp could not parse, with its
// default handler's statuses as problem+json: 431 for a head over the read
// buffer, 408 for a head that did not arrive in time, else 400; but 501
// for HTTP/2's connection preface (PRI * HTTP/2.0), as route answers a PRI
// request: fasthttp refuses the preface's target before the handler, and
// its error quotes the input, which is how the preface is known (not with
// the server's SecureErrorLogMessage, which leaves it 400).
func fastErrorHandler(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	var op *net.OpError
	switch {
	case errors.As(err, &small):
		fastProblem(ctx, http.StatusRequestHeaderFieldsTooLarge, "Request header too large", "the request head is larger than the gateway reads")
	case errors.As(err, &op) && op.Timeout():
		fastProblem(ctx, http.StatusRequestTimeout, "Request timeout", "the request head did not arrive in time")
	case strings.Contains(err.Error(), `"PRI * HTTP/2.0`):
		rt, _ := proxy.Refuse(&proxy.Request{Method: "PRI"})
		fastProblem(ctx, rt.Status, rt.Title, rt.Detail)
	default:
		fastProblem(ctx, http.StatusBadRequest, "Bad request", "the request could not be parsed")
	}
}

// fastRequestID returns the client's X-Request-Id when it is the only one
// and well-formed, else a fresh one, either held in buf (so the string is
// valid while buf is unchanged).
func fastRequestID(h *fasthttp.RequestHeader, buf *[128]byte) string {
	if vs := h.PeekAll("X-Request-Id"); len(vs) == 1 && apiv1.ValidRequestID(proxy.UnsafeString(vs[0])) {
		return proxy.UnsafeString(buf[:copy(buf[:], vs[0])])
	}
	return proxy.UnsafeString(proxy.AppendRequestID(buf[:0]))
}

// fastIsUpgrade reports whether the request asks to switch protocols, to
// another protocol than h2c (IsH2CUpgrade: such a request is forwarded as
// a plain one).
func fastIsUpgrade(h *fasthttp.RequestHeader) bool {
	if up := h.Peek(fasthttp.HeaderUpgrade); len(up) == 0 || proxy.IsH2CUpgrade(proxy.UnsafeString(up)) {
		return false
	}
	return namedInBytes(h.PeekAll(fasthttp.HeaderConnection), "Upgrade")
}

// peerIP appends the peer's IP address to dst: the peer, never a header.
func peerIP(dst []byte, a net.Addr) []byte {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap().AppendTo(dst)
		}
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	return append(dst, s...)
}

// namedInBytes is NamedIn over fasthttp's field values.
func namedInBytes(conn [][]byte, k string) bool {
	for _, v := range conn {
		if proxy.NamedIn([]string{proxy.UnsafeString(v)}, k) {
			return true
		}
	}
	return false
}
