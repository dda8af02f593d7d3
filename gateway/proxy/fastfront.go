package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/api/apiv1"
)

// The fasthttp front: an alternative HTTP/1.1 server side for the same
// routing, pick and bookkeeping as ServeHTTP. It parses requests with
// fasthttp (the server must set StreamRequestBody, see NewFastServer),
// builds the same view, calls route, and forwards over the same
// per-endpoint connection pools as the net/http front, so the upstream's
// connect, response-header and idle timeouts apply alike. The response is
// parsed with fasthttp too and streamed back to the client.
//
// Forwarding is shared with the net/http front through exchangeRetrying
// and transmit (forward.go): the same pools, connect, response-header and
// idle timeouts, retries and their budget (retry.go), and passive checks
// (passive.go); the bookkeeping is serveEndpoint's (fastExchange). What is
// the front's own: the answer header is parsed with fasthttp's response
// parser (so the answer streams through fasthttp without an http.Header
// per request), and the bookkeeping ends when fasthttp closes the body
// stream instead of in a deferred function.
//
// What it does not do (yet): Upgrade requests are answered 501 and https
// endpoints 502 (the net/http front serves both through the standard
// reverse proxy, whose transport reports to the passive checks; there is
// no such path here). There is no per-request context: a client that goes
// away while the endpoint has not answered yet is noticed only at the
// response-header timeout, and its request is then counted 504, not 499.
//
// Request framing: fasthttp refuses on its own (400, or 431 for a head
// over ReadBufferSize, connection closed) duplicate Content-Length fields,
// even equal ones, a Transfer-Encoding other than chunked when it has
// parsed one, invalid or overflowing chunk sizes and a space before a
// field's colon. It accepts what fastBadHead refuses here: bare LF line
// ends, obsolete line folding, and Transfer-Encoding with Content-Length
// (it goes by Transfer-Encoding and closes the connection after). It also
// accepts a bare LF ending the request line, which cannot be refused here
// because fasthttp keeps no copy of the request line; net/http accepts it
// as well, and the request line is written anew upstream. Any HTTP
// version it serves as HTTP/1.0; ServeFastHTTP refuses all but 1.0 and 1.1
// (505).

// fastReadHeaderTimeout is how long the fasthttp front waits for a whole
// request head, as the net/http front's ReadHeaderTimeout.
const fastReadHeaderTimeout = 10 * time.Second

// NewFastServer returns a fasthttp server that serves p with the settings
// the fasthttp front relies on: request bodies streamed as they arrive, no
// default Server or Content-Type fields (the endpoint's pass through; Date
// is the gateway's), no multipart pre-parsing. idle bounds a keep-alive connection
// between requests; 0 means fasthttp's default (none).
func NewFastServer(p *Proxy, idle time.Duration) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:                      p.ServeFastHTTP,
		Name:                         "dwara",
		StreamRequestBody:            true,
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		IdleTimeout:                  idle,
		// ReadTimeout bounds the request head from its first byte (from the
		// accept on a new connection), like net/http's ReadHeaderTimeout on
		// the other front; ServeFastHTTP lifts it for the body.
		ReadTimeout:     fastReadHeaderTimeout,
		ReadBufferSize:  16 << 10, // also the largest request head
		WriteBufferSize: 16 << 10,
		CloseOnShutdown: true,
		Logger:          p.errorLog,
	}
}

// ServeFastHTTP routes and proxies one request parsed by fasthttp. It is
// the fasthttp counterpart of ServeHTTP and shares its routing and
// bookkeeping; see NewFastServer for the server it expects.
func (p *Proxy) ServeFastHTTP(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	t := p.table.Load()
	if t == nil {
		fastProblem(ctx, http.StatusServiceUnavailable, "No generation loaded", "the gateway has not applied a configuration generation yet")
		return
	}
	h := &ctx.Request.Header
	if why := fastBadHead(h.RawHeaders(), h.ContentLength()); why != "" {
		// Framing this front will not guess at: refuse it and end the
		// connection, since what follows on it cannot be trusted.
		ctx.SetConnectionClose()
		fastProblem(ctx, http.StatusBadRequest, "Bad request framing", why)
		return
	}
	if proto := b2s(h.Protocol()); proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		// fasthttp serves any other version as HTTP/1.0; net/http refuses.
		ctx.SetConnectionClose()
		fastProblem(ctx, http.StatusHTTPVersionNotSupported, "HTTP version not supported", "this front speaks HTTP/1.0 and HTTP/1.1")
		return
	}
	if cl := h.ContentLength(); cl > 0 || cl == -1 {
		// The server's ReadTimeout bounds the request head (see
		// NewFastServer); a body streams for as long as it takes, as on the
		// net/http front.
		_ = ctx.Conn().SetReadDeadline(time.Time{})
	}
	if fastIsUpgrade(h) {
		fastProblem(ctx, http.StatusNotImplemented, "Upgrade not supported", "this front does not pass protocol upgrades through")
		ctx.SetConnectionClose()
		return
	}
	var ipBuf [64]byte
	ip := peerIP(ipBuf[:0], ctx.RemoteAddr())
	var cookieLines [1]string
	var cookies []string
	if c := h.Peek(fasthttp.HeaderCookie); len(c) > 0 {
		cookieLines[0] = b2s(c)
		cookies = cookieLines[:]
	}
	rid := fastRequestID(h)
	rt := p.route(t, view{
		host:      b2s(ctx.Host()),
		path:      b2s(ctx.Path()),
		cookies:   cookies,
		requestID: rid,
		clientIP:  b2s(ip),
		tls:       ctx.IsTLS(),
	})
	if rt.status != 0 {
		fastProblem(ctx, rt.status, rt.title, rt.detail)
		return
	}
	p.fastServeEndpoint(ctx, rt, rid, ip, start)
}

// fastExchange is the bookkeeping of one proxied request on the fasthttp
// front, serveEndpoint's for this front. It is begun by fastServeEndpoint
// and finished exactly once: by the handler's defer, or, when the answer
// has a body to stream, by the body's CloseWithError after fasthttp has
// written it (or failed to).
type fastExchange struct {
	p     *Proxy
	tg    *target
	a     attempt // the endpoint serving the request, retries included
	start time.Time
	code  int

	conn *upConn
	up   *fasthttp.Response
	body io.Reader // the endpoint's body stream
	out  *fasthttp.ResponseHeader
	// remaining is what a Content-Length body still owes; -1 when the body
	// ends at its last chunk or at the end of the connection.
	remaining int64
	done      bool // the endpoint's body was read to its end
	cut       bool // reading the endpoint's body failed
}

var fastExchanges = sync.Pool{New: func() any { return new(fastExchange) }}

// fastServeEndpoint forwards the request to rt.ep through the forwarding
// path shared with the net/http front (exchangeRetrying: the same pools,
// timeouts, retries and passive checks) and does the bookkeeping of
// serveEndpoint: begun here, finished in a defer unless the response body
// took it over.
func (p *Proxy) fastServeEndpoint(ctx *fasthttp.RequestCtx, rt route, rid string, ip []byte, start time.Time) {
	x := fastExchanges.Get().(*fastExchange)
	*x = fastExchange{p: p, tg: rt.tg, a: newAttempt(rt.ep), start: start}
	handedOver := false
	defer func() {
		if !handedOver {
			x.finish(nil)
		}
	}()
	if rt.setCookie != "" {
		ctx.Response.Header.Add(fasthttp.HeaderSetCookie, rt.setCookie)
	}
	if rt.ep.pool == nil {
		x.code = p.fastForwardError(ctx, rt, rid, errors.New("https endpoints are not served by this front"))
		return
	}
	h := &ctx.Request.Header
	cl := h.ContentLength()
	u := rt.tg.up
	xc, err := p.exchangeRetrying(ctx, u, &x.a, outbound{
		method: b2s(h.Method()), body: cl > 0 || cl == -1,
		requestID: rid, service: rt.tg.hdrService[0],
	}, func(c *upConn, ep *endpoint) (bool, error) {
		return p.fastSend(ctx, c, ep, x, rt.tg, rid, ip, cl)
	})
	if err != nil {
		x.releaseUp()
		rt.ep = x.a.ep
		x.code = p.fastForwardError(ctx, rt, rid, err)
		return
	}
	x.conn = xc.conn
	x.code = x.up.StatusCode()
	p.answered(u, x.a.ep, x.code)
	handedOver = x.respond(ctx, rid)
}

// releaseUp gives back the endpoint's parsed answer, if any.
func (x *fastExchange) releaseUp() {
	if x.up != nil {
		if x.body != nil {
			_ = x.up.CloseBodyStream()
		}
		fasthttp.ReleaseResponse(x.up)
		x.up, x.body = nil, nil
	}
}

// finish ends the exchange: the connection goes back to the pool when its
// answer was read to the end and the endpoint keeps it open, and the
// endpoint state and metrics are updated. werr is the error that ended
// writing the answer to the client (nil: it all went out): an answer the
// endpoint cut is counted as 502 and is the endpoint's failure, one the
// client did not take to its end as 499 and is not, as in serveEndpoint.
func (x *fastExchange) finish(werr error) {
	complete := x.done && werr == nil && !x.cut
	if c := x.conn; c != nil {
		if complete && !x.up.ConnectionClose() {
			x.a.ep.pool.put(c)
		} else {
			c.nc.Close()
		}
	}
	x.releaseUp()
	code := x.code
	switch {
	case x.cut:
		code = http.StatusBadGateway
	case x.conn != nil && !complete:
		code = statusClientGone
	}
	x.a.end(x.tg.up, code >= 500)
	x.tg.codes.inc(code)
	x.tg.duration.Observe(time.Since(x.start).Seconds())
	*x = fastExchange{}
	fastExchanges.Put(x)
}

// fastSend is the fasthttp front's sendFunc: it writes the request on c,
// a connection to ep, through transmit and reads the answer header with
// fasthttp's response parser into x.up.
func (p *Proxy) fastSend(ctx *fasthttp.RequestCtx, c *upConn, ep *endpoint, x *fastExchange, tg *target, rid string, ip []byte, cl int) (sent bool, err error) {
	x.releaseUp() // a failed earlier attempt's
	h := &ctx.Request.Header
	writeFastHead(c.bw, ctx, ep, tg, rid, ip, cl)
	var body io.Reader
	if cl > 0 || cl == -1 {
		if body = ctx.RequestBodyStream(); body == nil {
			body = bytes.NewReader(ctx.Request.Body())
		}
	}
	sent, err = p.transmit(c, ep, body, int64(cl), func(bw *bufio.Writer) {
		// The client's trailers, read from its last chunk; the field block
		// ends with the empty line.
		bw.Write(ctx.Request.Header.TrailerHeader())
	})
	if err != nil {
		return sent, err
	}
	up := fasthttp.AcquireResponse()
	x.up = up
	up.StreamBody = true
	up.SkipBody = h.IsHead()
	if err := up.ReadLimitBody(c.br, 0); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = errUpstreamTimeout
		}
		return sent, err
	}
	// The header is in: a slow body streams for as long as it takes.
	_ = c.nc.SetReadDeadline(time.Time{})
	if up.StatusCode() == http.StatusSwitchingProtocols {
		return sent, errors.New("upstream switched protocols without an upgrade request")
	}
	return sent, nil
}

// writeFastHead writes the request line and header for the endpoint: the
// client's fields without the hop-by-hop ones (with those named in
// Connection), its X-Dwara-*, X-Request-Id and X-Forwarded-* fields, then
// the gateway's set and the body framing. Errors surface at Flush.
func writeFastHead(bw *bufio.Writer, ctx *fasthttp.RequestCtx, ep *endpoint, tg *target, rid string, ip []byte, cl int) {
	h := &ctx.Request.Header
	bw.Write(h.Method())
	bw.WriteByte(' ')
	if u := h.RequestURI(); len(u) > 0 && (u[0] == '/' || string(u) == "*") {
		bw.Write(u)
	} else {
		bw.Write(ctx.URI().RequestURI())
	}
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(ep.hostHeader)
	bw.WriteString("\r\n")
	conn := h.PeekAll(fasthttp.HeaderConnection)
	var connBuf [4][]byte
	conn = connBuf[:copy(connBuf[:], conn)]
	xffHop := namedInBytes(conn, "X-Forwarded-For")
	for k, v := range h.All() {
		if skipFastRequestHeader(k) || namedInBytes(conn, b2s(k)) {
			continue
		}
		writeFieldBytes(bw, k, v)
	}
	bw.WriteString("X-Request-Id: ")
	bw.WriteString(rid)
	bw.WriteString("\r\nX-Dwara-Service: ")
	bw.WriteString(tg.hdrService[0])
	bw.WriteString("\r\nX-Dwara-Upstream: ")
	bw.WriteString(tg.hdrUpstream[0])
	bw.WriteString("\r\nX-Dwara-Generation: ")
	bw.WriteString(tg.hdrGeneration[0])
	bw.WriteString("\r\nX-Forwarded-For: ")
	if !xffHop {
		for _, v := range h.PeekAll("X-Forwarded-For") {
			bw.Write(cleanBytes(v))
			bw.WriteString(", ")
		}
	}
	bw.Write(ip)
	bw.WriteString("\r\nX-Forwarded-Host: ")
	bw.Write(cleanBytes(ctx.Host()))
	if ctx.IsTLS() {
		bw.WriteString("\r\nX-Forwarded-Proto: https\r\n")
	} else {
		bw.WriteString("\r\nX-Forwarded-Proto: http\r\n")
	}
	switch {
	case cl > 0:
		var num [20]byte
		bw.WriteString("Content-Length: ")
		bw.Write(strconv.AppendInt(num[:0], int64(cl), 10))
		bw.WriteString("\r\n")
	case cl == -1:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
		if keys := h.PeekTrailerKeys(); len(keys) > 0 {
			bw.WriteString("Trailer: ")
			for i, k := range keys {
				if i > 0 {
					bw.WriteString(", ")
				}
				bw.Write(k)
			}
			bw.WriteString("\r\n")
		}
	case h.IsPost() || h.IsPut() || h.IsPatch():
		bw.WriteString("Content-Length: 0\r\n")
	}
	bw.WriteString("\r\n")
}

// respond copies the endpoint's answer to the client: its header without
// the hop-by-hop fields, the request id unless the endpoint set one, and
// its body as a stream that finishes the exchange when fasthttp closes it.
// It reports whether the body took the exchange over.
func (x *fastExchange) respond(ctx *fasthttp.RequestCtx, rid string) bool {
	up := x.up
	out := &ctx.Response.Header
	out.SetStatusCode(up.StatusCode())
	conn := up.Header.PeekAll(fasthttp.HeaderConnection)
	var connBuf [4][]byte
	conn = connBuf[:copy(connBuf[:], conn)]
	hasRID := false
	for k, v := range up.Header.All() {
		if skipFastResponseHeader(k) || namedInBytes(conn, b2s(k)) {
			continue
		}
		if string(k) == fasthttp.HeaderTrailer {
			_ = out.AddTrailerBytes(v)
			continue
		}
		if string(k) == "X-Request-Id" {
			hasRID = true
		}
		out.AddBytesKV(k, v)
	}
	if !hasRID {
		out.Set("X-Request-Id", rid)
	}
	body := up.BodyStream()
	if body == nil { // HEAD, 204, 304: no body to stream
		if cl := up.Header.ContentLength(); cl >= 0 && ctx.IsHead() {
			out.SetContentLength(cl)
		}
		x.done = true
		return false
	}
	x.body, x.out = body, out
	x.remaining = -1
	cl := up.Header.ContentLength()
	if cl >= 0 {
		x.remaining = int64(cl)
	} else {
		cl = -1 // chunked to the client, whatever the endpoint's framing
	}
	ctx.Response.SetBodyStream((*fastBody)(x), cl)
	return true
}

// fastBody is the endpoint's response body as fasthttp streams it to the
// client. fasthttp closes it once the answer is written or has failed;
// Close finishes the exchange.
type fastBody fastExchange

func (b *fastBody) Read(p []byte) (int, error) {
	if b.remaining == 0 {
		b.done = true
		return 0, io.EOF
	}
	if b.remaining > 0 && int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.body.Read(p)
	if err != nil && err != io.EOF {
		b.cut = true
	}
	if b.remaining > 0 {
		b.remaining -= int64(n)
		if b.remaining == 0 && err == nil {
			b.done = true
		}
	}
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

// copyTrailers gives the client the endpoint's trailer values, also those
// the endpoint did not announce (the client's Trailer field is written
// already; the values still follow the last chunk).
func (b *fastBody) copyTrailers() {
	for _, k := range b.up.Header.PeekTrailerKeys() {
		if !slices.ContainsFunc(b.out.PeekTrailerKeys(), func(d []byte) bool { return bytes.Equal(d, k) }) {
			if b.out.AddTrailerBytes(k) != nil {
				continue
			}
		}
		for _, v := range b.up.Header.PeekAll(b2s(k)) {
			b.out.AddBytesKV(k, v)
		}
	}
}

// CloseWithError is called by fasthttp with the error that ended the
// write (nil when the whole answer went out).
func (b *fastBody) CloseWithError(err error) error {
	(*fastExchange)(b).finish(err)
	return nil
}

// fastForwardError answers a request whose exchange failed before anything
// was written to the client, like forwardError: 504 for a timeout, 400 for
// a request body that cannot be read from the client, else 502; the cause
// of a 502 or 504 is logged, never sent.
func (p *Proxy) fastForwardError(ctx *fasthttp.RequestCtx, rt route, rid string, err error) int {
	if _, ok := errors.AsType[clientBodyError](err); ok {
		// Not the endpoint's failure: the client sent a body that does not
		// parse, or went away while sending it.
		ctx.SetConnectionClose()
		ctx.Response.Header.Set("X-Request-Id", rid)
		fastProblem(ctx, http.StatusBadRequest, "Bad request body", "the request body could not be read")
		return http.StatusBadRequest
	}
	p.log.Warn("upstream request failed",
		"request_id", rid,
		"service", rt.tg.hdrService[0],
		"upstream", rt.tg.hdrUpstream[0],
		"endpoint", rt.ep.addr, "err", err)
	ctx.Response.Header.Set("X-Request-Id", rid)
	status, title, detail := upstreamProblem(err)
	fastProblem(ctx, status, title, detail)
	return status
}

// fastProblem writes an RFC 9457 problem+json answer, as writeProblem.
func fastProblem(ctx *fasthttp.RequestCtx, status int, title, detail string) {
	ctx.Response.Header.SetContentType("application/problem+json")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.SetStatusCode(status)
	ctx.Response.SetBodyString(problemJSON(status, title, detail))
}

// fastBadHead checks the header block of a request as it came on the wire
// (raw, without the request line) for what fasthttp accepts but a proxy
// must not pass on, and returns why it is refused, or "": a line ended by
// a bare LF, an obsolete line folding (a line starting with a space or a
// tab), Transfer-Encoding together with Content-Length (RFC 9112 section
// 6.1 allows a server to go by Transfer-Encoding; this front refuses, as
// the ambiguity is the smuggling vector), and a Transfer-Encoding that
// fasthttp did not take for chunked (cl is fasthttp's Content-Length: -1
// for a chunked body). It does not allocate.
func fastBadHead(raw []byte, cl int) string {
	te, hasCL := false, false
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			break
		}
		if i == 0 || raw[i-1] != '\r' {
			return "a header line ends with a bare LF"
		}
		line := raw[:i-1]
		raw = raw[i+1:]
		if len(line) == 0 {
			break // the end of the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "obsolete line folding"
		}
		name, _, _ := bytes.Cut(line, []byte{':'})
		te = te || equalFoldASCII(name, "Transfer-Encoding")
		hasCL = hasCL || equalFoldASCII(name, "Content-Length")
	}
	switch {
	case te && hasCL:
		return "both Transfer-Encoding and Content-Length"
	case te && cl != -1:
		return "a Transfer-Encoding other than chunked"
	}
	return ""
}

// fastRequestID returns the client's X-Request-Id when it is the only one
// and well-formed, else a fresh one.
func fastRequestID(h *fasthttp.RequestHeader) string {
	if vs := h.PeekAll("X-Request-Id"); len(vs) == 1 && apiv1.ValidRequestID(b2s(vs[0])) {
		return string(vs[0])
	}
	return newRequestID()
}

// fastIsUpgrade reports whether the request asks to switch protocols.
func fastIsUpgrade(h *fasthttp.RequestHeader) bool {
	if len(h.Peek(fasthttp.HeaderUpgrade)) == 0 {
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

// skipFastRequestHeader reports whether the client's field k is not
// forwarded as it is: skipRequestHeader's set, the gateway's own fields,
// and the client's X-Request-Id (the gateway writes the one it kept).
func skipFastRequestHeader(k []byte) bool {
	if len(k) > 8 && equalFoldASCII(k[:8], "X-Dwara-") {
		return true
	}
	s := b2s(k)
	return s == "X-Request-Id" || skipRequestHeader(s)
}

// skipFastResponseHeader reports whether the endpoint's field k is not
// copied to the client: the hop-by-hop fields and the framing, which the
// front writes itself.
func skipFastResponseHeader(k []byte) bool {
	s := b2s(k)
	return s == fasthttp.HeaderContentLength || skipResponseHeader(s) && s != fasthttp.HeaderTrailer
}

// namedInBytes is namedIn over fasthttp's field values.
func namedInBytes(conn [][]byte, k string) bool {
	for _, v := range conn {
		if namedIn([]string{b2s(v)}, k) {
			return true
		}
	}
	return false
}

func writeFieldBytes(bw *bufio.Writer, k, v []byte) {
	bw.Write(k)
	bw.WriteString(": ")
	bw.Write(cleanBytes(v))
	bw.WriteString("\r\n")
}

// cleanBytes is cleanValue for bytes.
func cleanBytes(v []byte) []byte {
	if bytes.ContainsAny(v, "\r\n") {
		return []byte(cleanValue(string(v)))
	}
	return v
}

func equalFoldASCII(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// b2s views b as a string without copying. The string must not outlive
// the request that b belongs to, nor be used after b changes.
func b2s(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
