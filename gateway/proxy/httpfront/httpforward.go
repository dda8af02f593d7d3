package httpfront

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dwara/dwara/gateway/proxy"

	"github.com/dwara/dwara/api/apiv1"
)

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
func (p server) forward(w *statusWriter, r *http.Request, a *proxy.Attempt) int {
	ctx := r.Context()
	dl, _ := w.ResponseWriter.(proxy.Deadliner)
	if p.StallTimeout() > 0 && dl != nil && hasBody(r) {
		// A request body that stalls ends the request; the deadline is
		// lifted once the exchange is over, so the server's own reads of
		// the connection (it notices a client that hangs up) never meet it.
		w.body = proxy.StallBody{R: r.Body, DL: dl, Stall: p.StallTimeout()}
		body := r.Body
		r.Body = &w.body
		defer func() { r.Body = body }()
	}
	q := &w.out
	// gone stops the watch of the client on the connection of the latest
	// exchange (one per connection tried, so one per request but for
	// retries); false: the client went away, and the connection is cut.
	var gone func() bool
	x, err := p.ExchangeRetrying(ctx, a, q, func(c *proxy.Conn, ep *proxy.Endpoint, tg *proxy.Target) (sent bool, err error) {
		if gone != nil {
			gone() // an earlier connection's, which failed
		}
		gone = afterFunc(ctx, c.Cutter())
		return p.send(c, r, q, ep, tg)
	})
	if w.body.DL != nil {
		_ = dl.SetReadDeadline(time.Time{})
	}
	// The logs name the upstream the request ended on (failover).
	r.Header["X-Dwara-Upstream"] = a.Target.HdrUpstream
	if err != nil {
		if gone != nil {
			gone()
		}
		return p.forwardError(w, r, a.Endpoint, err)
	}
	ep := a.Endpoint
	c := x.Conn
	code := c.Head.Status
	p.AnsweredBy(a, code)
	if code == http.StatusSwitchingProtocols {
		return p.tunnel(w, r, ep, c, q.Upgrade, gone)
	}
	reusable, clientGone := false, false
	defer func() { // also when copyResponse aborts the client connection
		if gone != nil && !gone() { // nil: an answer from memory (the cache)
			reusable = false // the deadline was set: the connection is spoiled
		}
		if reusable {
			ep.Pool.Put(c)
		} else {
			c.Net.Close()
		}
	}()
	reusable, clientGone = p.copyResponse(w, r, c, dl)
	if clientGone {
		return proxy.StatusClientGone
	}
	return code
}

// afterFunc is context.AfterFunc, with a context's own AfterFunc method
// (the one context.AfterFunc would use, as Dwara's HTTP/2 server's stream
// contexts have) called directly: context.AfterFunc's wrapping of it
// would allocate four times a request.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// send writes r, whose view is q, on c and reads the answer header into
// c.head under the response header timeout (a 101 only for an upgrade).
// sent reports whether the request body was touched.
func (p server) send(c *proxy.Conn, r *http.Request, q *proxy.Request, ep *proxy.Endpoint, tg *proxy.Target) (sent bool, err error) {
	q.WriteHead(c.Writer, ep, tg)
	var body io.Reader
	length := int64(0)
	if hasBody(r) {
		body, length = r.Body, r.ContentLength
	}
	sent, err = p.Transmit(c, ep, body, length, func(bw *bufio.Writer) {
		for k, vv := range r.Trailer {
			for _, v := range vv {
				proxy.WriteField(bw, k, v)
			}
		}
		bw.WriteString("\r\n")
	})
	if err != nil {
		return sent, err
	}
	// A 101 is taken only for an upgrade (forward relays it, tunnel).
	if err = c.ReadAnswer(ep.Pool.Watch, r.Method == http.MethodHead, q.Upgrade != ""); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = proxy.ErrUpstreamTimeout
		}
		return sent, err
	}
	c.HeadRead(q.Upgrade != "")
	return sent, nil
}

// hasBody reports whether r has a body to send.
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// httpOutbound fills q, the core's view of r (outbound.go): the net/http
// front's translation of its request, which it routes (route) and
// forwards (WriteHead) by. The client's X-Request-Id is replaced by a
// fresh one unless it is well-formed (requestID). The view's strings are
// r's own; reusing q's slices, it does not allocate once warmed up.
func httpOutbound(q *proxy.Request, r *http.Request) {
	q.Reset()
	q.RequestID = requestID(r)
	q.Method = r.Method
	q.Target = r.RequestURI
	if q.Target == "" || q.Target[0] != '/' && q.Target != "*" {
		q.Target = r.URL.RequestURI() // absolute form: its path and query
	}
	q.Host = r.Host
	q.Path = r.URL.Path
	q.Cookies = r.Header["Cookie"]
	for k, vv := range r.Header {
		for _, v := range vv {
			q.AddField(k, v)
		}
	}
	if hasBody(r) {
		q.Length = r.ContentLength
		if q.Length < 0 {
			q.Length = -1
			for k := range r.Trailer {
				q.Trailers = append(q.Trailers, k)
			}
		}
	}
	q.ClientIP = clientIP(r)
	q.TLS = r.TLS != nil
	if isUpgrade(r) {
		q.Upgrade = r.Header.Get("Upgrade")
	}
}

// copyResponse writes the answer on c to the client: its head as
// CopyAnswer copies it (with the endpoint's Content-Length, which the
// net/http server frames the body by), then its body, flushed as it
// arrives when it streams, then its trailers. It reports whether the
// upstream connection may be reused (the body was read to its end and the
// endpoint did not ask to close), and whether the client went away before
// the end.
//
// With a stall timeout and dl, the client connection's write deadline
// moves forward before every write that may wait for the client: a client
// that reads nothing for the stall timeout is cut (counted 499), a slow
// stream that keeps moving never is. The deadline is lifted at the end, so
// the next request on the connection has none. An answer whose body fits
// the server's buffer (unflushedBody) is written without one: the server
// writes it to the connection after the handler returned, when the
// deadline would have been lifted already, and on HTTP/2 each change of
// it is a message to the connection's goroutine and a timer.
func (p server) copyResponse(w *statusWriter, r *http.Request, c *proxy.Conn, dl proxy.Deadliner) (reusable, clientGone bool) {
	a := &c.Head
	h := w.Header()
	// One slice holds every value copied (the Content-Length and the
	// request id too), one string their text (stdAnswer.End).
	w.values = make([]string, 0, len(a.Fields)+2)
	if a.Length >= 0 && a.Framing != proxy.BodyChunked {
		var digits [20]byte
		(*stdAnswer)(w).hold(pendingField{key: "Content-Length"}, strconv.AppendInt(digits[:0], a.Length, 10))
	}
	proxy.CopyAnswer(a, (*stdAnswer)(w), w.out.RequestID)
	body := c.AnswerStream()
	if body == nil {
		return !a.Close, false
	}
	flush := a.Framing != proxy.BodyLength || isEventStream(h)
	buf := p.Buffers().Get()
	defer p.Buffers().Put(buf)
	if p.StallTimeout() <= 0 {
		dl = nil
	}
	armed := false // the write deadline is set
	defer func() {
		if armed {
			_ = dl.SetWriteDeadline(time.Time{})
		}
	}()
	sent := 0
	for {
		n, rerr := body.Read(buf)
		sent += n
		if n > 0 {
			if dl != nil && (armed || flush || sent > unflushedBody) {
				_ = dl.SetWriteDeadline(time.Now().Add(p.StallTimeout()))
				armed = true
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
			p.Logger().Warn("upstream response cut", "request_id", r.Header.Get("X-Request-Id"),
				"service", r.Header.Get("X-Dwara-Service"), "upstream", r.Header.Get("X-Dwara-Upstream"), "err", rerr)
			panic(http.ErrAbortHandler)
		}
	}
	for _, f := range a.Trailers {
		k := http.TrailerPrefix + http.CanonicalHeaderKey(string(f.Name))
		h[k] = append(h[k], string(f.Value))
	}
	if r.ProtoMajor == 2 && !flush && sent > 0 && sent <= joinMax {
		joinAnswer(r)
	}
	return !a.Close, false
}

// unflushedBody is the most of an answer's body that net/http's server
// holds in its buffer until the handler returns: a response's 2 KiB
// before it chooses its framing on HTTP/1.1 (an HTTP/2 stream's is 4 KiB).
const unflushedBody = 2 << 10

// stdAnswer is the AnswerSink of the net/http front: the header of its
// answer, written at the status. The fields wait in the writer until End,
// which makes one string of all their values and uncommon names (a string
// for each was most of the allocations of an HTTP/2 answer that were the
// front's).
type stdAnswer statusWriter

// pendingField is a field of the endpoint's answer between stdAnswer's
// Field and End: its key, a common one's, or "" when its canonical name
// (keyLen bytes) is in statusWriter.text right before the value; and
// where the value begins and ends in text.
type pendingField struct {
	key       string
	keyLen    int
	valueFrom int
	end       int
}

func (o *stdAnswer) Field(name, value []byte) {
	if k, ok := commonAnswerKeys[string(name)]; ok {
		o.hold(pendingField{key: k}, value)
		return
	}
	o.text = appendCanonicalKey(o.text, name)
	o.hold(pendingField{keyLen: len(name)}, value)
}

func (o *stdAnswer) Trailer(value []byte) { o.hold(pendingField{key: "Trailer"}, value) }

// hold keeps f, whose key is set, with value until End.
func (o *stdAnswer) hold(f pendingField, value []byte) {
	f.valueFrom = len(o.text)
	o.text = append(o.text, value...)
	f.end = len(o.text)
	o.fields = append(o.fields, f)
}

func (o *stdAnswer) End(code int, rid string) {
	text := string(o.text)
	for _, f := range o.fields {
		k := f.key
		if k == "" {
			k = text[f.valueFrom-f.keyLen : f.valueFrom]
		}
		o.add(k, text[f.valueFrom:f.end])
	}
	o.text, o.fields = o.text[:0], o.fields[:0]
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

// appendCanonicalKey appends name, a field name the answer's parser
// found a token, in the canonical form of net/http's header keys
// (textproto.CanonicalMIMEHeaderKey): each letter that begins the name
// or follows a hyphen in upper case, every other letter in lower case.
func appendCanonicalKey(dst, name []byte) []byte {
	upper := true
	for _, c := range name {
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
		upper = c == '-'
	}
	return dst
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
// anything was written to the client, as ExchangeFailure decides, and
// returns the status counted.
func (p server) forwardError(w http.ResponseWriter, r *http.Request, ep *proxy.Endpoint, err error) int {
	h := r.Header
	f := p.ExchangeFailure(err, func() bool { return r.Context().Err() != nil },
		h.Get("X-Request-Id"), h.Get("X-Dwara-Service"), h.Get("X-Dwara-Upstream"), ep.Addr)
	if f.Status == proxy.StatusClientGone {
		return f.Status
	}
	w.Header()["X-Request-Id"] = h["X-Request-Id"]
	if f.Close {
		w.Header()["Connection"] = []string{"close"}
	}
	writeProblem(w, f.Status, f.Title, f.Detail)
	return f.Status
}

// isUpgrade reports whether r asks to switch protocols (websockets), to
// another protocol than h2c (IsH2CUpgrade: such a request is forwarded as
// a plain one).
func isUpgrade(r *http.Request) bool {
	up := r.Header["Upgrade"]
	return len(up) > 0 && proxy.NamedIn(r.Header["Connection"], "Upgrade") && !proxy.IsH2CUpgrade(up[0])
}

// ServeHTTP routes and proxies one request.
func (p server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	t := p.Current()
	if t == nil {
		w.Header().Set("X-Request-Id", requestID(r))
		writeProblem(w, http.StatusServiceUnavailable, "No generation loaded", "the gateway has not applied a configuration generation yet")
		return
	}
	sw := getStatusWriter(w)
	q := &sw.out
	httpOutbound(q, r)
	sw.req, sw.stall, q.Body = r, p.StallTimeout(), sw
	rt := p.Route(t, q)
	// Remove every X-Dwara-* header the client sent (an override header
	// was read by route): only the gateway speaks them upstream. Deleting
	// during range is allowed by the language.
	for k := range r.Header {
		if len(k) > 8 && strings.EqualFold(k[:8], "X-Dwara-") {
			delete(r.Header, k)
		}
	}
	if rt.Status != 0 {
		w.Header()["X-Request-Id"] = r.Header["X-Request-Id"]
		if rt.Status == http.StatusMethodNotAllowed {
			w.Header()["Allow"] = proxy.AllowedMethods
		}
		writeProblem(w, rt.Status, rt.Title, rt.Detail)
		if p.AccessLog() != nil {
			p.LogAccess(httpAccessLine(r), rt.Status, nil, nil, start)
		}
		putStatusWriter(sw)
		return
	}
	q.Service = rt.Target.HdrService[0]
	if rt.Body != nil { // read by the route: sent instead of the client's
		defer rt.Body.Release()
		r.Body, r.ContentLength = rt.Body, q.Length
	}
	if rt.SetCookie != "" {
		// A copy: net/http may write the header map after the handler
		// returns, when q's buffer may be another request's.
		w.Header().Add("Set-Cookie", strings.Clone(rt.SetCookie))
	}
	r.Header["X-Dwara-Service"] = rt.Target.HdrService
	r.Header["X-Dwara-Upstream"] = rt.Target.HdrUpstream
	r.Header["X-Dwara-Generation"] = rt.Target.HdrGeneration
	if rt.Target.Mirror != nil {
		defer p.mirrorHTTP(sw, r, rt).Release()
	}
	p.serveEndpoint(sw, r, rt, start)
}

// serveEndpoint forwards r to ep and does the bookkeeping of the exchange.
// A request that fails before any answer may be retried on other
// endpoints of tg's upstream (retry.go); the bookkeeping follows it from
// endpoint to endpoint. It runs in a defer, so an aborted answer (the
// panic http.ErrAbortHandler, from a cut upstream body) leaves the
// in-flight counts, the retry budget and the metrics balanced. An answer
// the client did not take to its end (it went away) is counted as 499 and
// is not the endpoint's failure; an answer the endpoint cut is counted as
// 502 and is. An upgraded tunnel is counted 101 when it ends, with its
// whole duration.
func (p server) serveEndpoint(sw *statusWriter, r *http.Request, rt proxy.Route, start time.Time) {
	a := rt.Begin(start)
	code := 0
	completed := false
	defer func() {
		switch {
		case !completed && r.Context().Err() != nil:
			code = proxy.StatusClientGone
		case !completed:
			code = http.StatusBadGateway
		case code == 0:
			code = sw.code
		}
		putStatusWriter(sw)
		a.End(code, start)
		if p.AccessLog() != nil {
			p.LogAccess(httpAccessLine(r), code, a.Target, a.Endpoint, start)
		}
	}()
	code = p.forward(sw, r, &a)
	completed = true
}

// httpAccessLine is r's AccessLine.
func httpAccessLine(r *http.Request) proxy.AccessLine {
	return proxy.AccessLine{RequestID: r.Header.Get("X-Request-Id"), Method: r.Method, Host: r.Host, Path: r.URL.Path, Client: clientIP(r)}
}

// requestID returns the request's X-Request-Id when it is 1..128 characters
// of [A-Za-z0-9._:-]; otherwise it sets a fresh random one and returns it.
func requestID(r *http.Request) string {
	if vs := r.Header["X-Request-Id"]; len(vs) == 1 && apiv1.ValidRequestID(vs[0]) {
		return vs[0]
	}
	vs := proxy.NewRequestIDValues()
	r.Header["X-Request-Id"] = vs
	return vs[0]
}

// clientIP returns the host part of r.RemoteAddr: the peer, never a header.
func clientIP(r *http.Request) string {
	a := r.RemoteAddr
	if i := strings.LastIndexByte(a, ':'); i >= 0 {
		a = a[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
}

// mirrorHTTP is the net/http front's hand-over of a request routed by rt
// to the service's mirror: MirrorTarget, the body read under the stall
// timeout, QueueMirror.
func (p server) mirrorHTTP(w *statusWriter, r *http.Request, rt proxy.Route) *proxy.MirrorBuf {
	q := &w.out
	ep, mb := p.MirrorTarget(q, rt)
	if ep == nil {
		return nil
	}
	if mb != nil {
		body := io.Reader(r.Body)
		if dl, ok := w.ResponseWriter.(proxy.Deadliner); ok && p.StallTimeout() > 0 {
			// As forward reads a body: one that stalls ends the request.
			body = &proxy.StallBody{R: r.Body, DL: dl, Stall: p.StallTimeout()}
			defer func() { _ = dl.SetReadDeadline(time.Time{}) }()
		}
		var ok bool
		if r.Body, ok = mb.Fill(body); !ok {
			return nil
		}
	}
	return p.QueueMirror(q, rt, ep, mb)
}
