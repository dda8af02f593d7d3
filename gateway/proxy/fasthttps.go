package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// https endpoints on the fasthttp front. They have no connection pool (the
// forwarding path speaks plain HTTP/1.1); the net/http front serves them
// through the endpoint's standard reverse proxy, ep.rp. This front sends
// them through the transport of that reverse proxy (ep.rp.Transport: the
// upstream's own http.Transport with its connect, response-header and
// idle timeouts, or Options.Transport, wrapped to report every exchange to
// the passive checks) with a request built here from the fasthttp request
// by the header rules of writeFastHead, and relays the answer as the
// forwarding path does: its body streamed through fasthttp, the
// bookkeeping ended when fasthttp closes it.
//
// Not ep.rp.ServeHTTP through fasthttpadaptor: the adaptor reads the whole
// request body into memory before the handler runs, and keeps a whole
// answer body the handler does not flush (the reverse proxy flushes only
// answers of unknown length and event streams), so large bodies would not
// stream; and it runs the handler on a goroutine of its own per request.
//
// The request body is read by the transport on a goroutine of its own,
// possibly still after the answer header (an endpoint may answer before
// reading the whole body); fastRequestBody lets go of the client's body
// when the exchange finishes, before fasthttp reads the connection again.
// A client that goes away before the answer header is noticed by a timer
// that looks at its connection every fastClientCheckInterval once the
// body is read (fastWatch); the request's context is then cancelled, so
// the transport gives up and its failure does not count for the passive
// checks. Nothing here is retried, as on the net/http front.

// fastServeTLS serves a request to an https endpoint (an upgrade when
// upgrade, the client's Upgrade value, is not nil) and reports whether the
// answer's body or the tunnel took the exchange over.
func (p *Proxy) fastServeTLS(ctx *fasthttp.RequestCtx, x *fastExchange, rt route, rid string, ip, upgrade []byte) bool {
	h := &ctx.Request.Header
	rctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	req, err := fastStdRequest(ctx, rt, rid, ip, upgrade)
	if err != nil {
		// The transport would refuse it, and count that against the
		// endpoint; the net/http server refuses such a request before.
		ctx.SetConnectionClose()
		ctx.Response.Header.Set("X-Request-Id", rid)
		fastProblem(ctx, http.StatusBadRequest, "Bad request", err.Error())
		x.code = http.StatusBadRequest
		return false
	}
	req = req.WithContext(rctx)
	var body *fastRequestBody
	if cl := h.ContentLength(); cl > 0 || cl == -1 {
		r := x.requestBody(ctx)
		body = &fastRequestBody{cb: clientBody{r: r, left: int64(cl)}, h: h, cancel: cancel}
		req.Body, req.ContentLength = body, int64(cl)
		if keys := h.PeekTrailerKeys(); cl == -1 && len(keys) > 0 {
			req.Trailer = make(http.Header, len(keys))
			for _, k := range keys {
				req.Trailer[http.CanonicalHeaderKey(string(k))] = nil
			}
			body.trailer = req.Trailer
		}
		x.reqBody = body
	}
	w := watchClient(ctx.Conn(), body, cancel)
	resp, err := rt.ep.rp.Transport.RoundTrip(req)
	if w.stop() {
		// The client went away, whatever the transport made of it.
		x.gone = true
		if err == nil {
			resp.Body.Close()
			err = errClientGone
		}
	}
	if err != nil {
		if body != nil {
			body.detach() // before fastForwardError may look at the client
			if body.failed() {
				err = clientBodyError{err}
			}
		}
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return p.fastTLSTunnel(ctx, x, rt, rid, resp, upgrade)
	}
	x.code = resp.StatusCode
	x.resp = resp
	return x.respondStd(ctx, rid)
}

// fastTLSTunnel relays a 101 answer of an https endpoint's transport, whose
// body is the connection, as fastUpgrade does one of the forwarding path.
func (p *Proxy) fastTLSTunnel(ctx *fasthttp.RequestCtx, x *fastExchange, rt route, rid string, resp *http.Response, upgrade []byte) bool {
	err := upgradeMismatch(b2s(upgrade), namedIn(resp.Header["Connection"], "Upgrade"), resp.Header.Get("Upgrade"))
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if err == nil && !ok {
		err = errNotUpgradable
	}
	if err != nil {
		resp.Body.Close()
		x.code = p.fastForwardError(ctx, x, rt, rid, err)
		return false
	}
	if x.reqBody != nil {
		x.reqBody.detach() // the client's connection is the tunnel's now
		x.reqBody = nil
	}
	head := newTunnelHead(rt.setCookie)
	for k, vv := range resp.Header {
		for _, v := range vv {
			head.add(k, v)
		}
	}
	fastStartTunnel(ctx, &fastTunnel{p: p, x: x, up: rwc, head: head.end(rid)})
	return true
}

// fastStdRequest builds the request for an https endpoint's transport
// from the client's: its method and target (in origin form), its fields
// by the rules of writeFastHead (without the hop-by-hop ones and those
// named in Connection, without its X-Dwara-* and X-Request-Id, its
// X-Forwarded-For list followed by the peer), the gateway's set, for an
// upgrade Connection: Upgrade and the Upgrade field, and no User-Agent of
// the transport's. The body and its framing are the caller's. It refuses,
// with the reason as its error, what the transport would refuse to send:
// a method or a field name that is not a token, a field value with a
// control character, a target it cannot write.
func fastStdRequest(ctx *fasthttp.RequestCtx, rt route, rid string, ip, upgrade []byte) (*http.Request, error) {
	h := &ctx.Request.Header
	path, query, hasQuery := bytes.Cut(fastTarget(h), []byte{'?'})
	u := &url.URL{Scheme: "https", Host: rt.ep.hostHeader, RawQuery: string(query), ForceQuery: hasQuery && len(query) == 0}
	if bytes.HasPrefix(path, []byte("//")) {
		// An opaque target starting with // would be written in absolute
		// form: parse it as a path instead.
		pu, err := url.ParseRequestURI(string(path))
		if err != nil {
			return nil, errors.New("the request target could not be parsed")
		}
		u.Path, u.RawPath = pu.Path, pu.RawPath
	} else {
		u.Opaque = string(path) // written as it came
	}
	hdr := make(http.Header, 16)
	var connBuf [8][]byte
	conn := connectionFields(&connBuf, h.PeekAll(fasthttp.HeaderConnection))
	for k, v := range h.All() {
		if skipRequestHeader(b2s(k)) || gatewayField(b2s(k)) || namedInBytes(conn, b2s(k)) {
			continue
		}
		key := http.CanonicalHeaderKey(string(k))
		hdr[key] = append(hdr[key], string(v))
	}
	tg := rt.tg
	hdr["X-Request-Id"] = []string{strings.Clone(rid)} // rid lives in the exchange; the transport may outlive it
	hdr["X-Dwara-Service"] = tg.hdrService
	hdr["X-Dwara-Upstream"] = tg.hdrUpstream
	hdr["X-Dwara-Generation"] = tg.hdrGeneration
	var xff []byte
	if !namedInBytes(conn, "X-Forwarded-For") {
		for _, v := range h.PeekAll("X-Forwarded-For") {
			xff = append(append(xff, v...), ", "...)
		}
	}
	hdr["X-Forwarded-For"] = []string{string(append(xff, ip...))}
	hdr["X-Forwarded-Host"] = []string{string(ctx.Host())}
	if ctx.IsTLS() {
		hdr["X-Forwarded-Proto"] = []string{"https"}
	} else {
		hdr["X-Forwarded-Proto"] = []string{"http"}
	}
	if upgrade != nil {
		hdr["Connection"] = []string{"Upgrade"}
		hdr["Upgrade"] = []string{string(upgrade)}
	}
	if !isToken(b2s(h.Method())) {
		return nil, errors.New("the method is not a token")
	}
	for k, vv := range hdr {
		if !isToken(k) {
			return nil, errors.New("a field name is not a token")
		}
		for _, v := range vv {
			if !isFieldValue(v) {
				return nil, errors.New("a field value has a control character")
			}
		}
	}
	if _, ok := hdr["User-Agent"]; !ok {
		hdr["User-Agent"] = []string{""} // the transport sends none
	}
	return &http.Request{
		Method:     string(h.Method()),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       rt.ep.hostHeader,
	}, nil
}

// isFieldValue reports whether v has no control character but tabs.
func isFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// respondStd copies an https endpoint's answer x.resp to the client, as
// respond does the forwarding path's: its header without the hop-by-hop
// fields, the request id unless the endpoint set one, its trailers
// announced, and its body as a stream that finishes the exchange when
// fasthttp closes it. It reports whether the body took the exchange over.
func (x *fastExchange) respondStd(ctx *fasthttp.RequestCtx, rid string) bool {
	resp := x.resp
	out := &ctx.Response.Header
	out.SetStatusCode(resp.StatusCode)
	conn := resp.Header["Connection"]
	for k, vv := range resp.Header {
		if k == "Content-Length" || skipResponseHeader(k) || namedIn(conn, k) {
			continue
		}
		for _, v := range vv {
			out.Add(k, v)
		}
	}
	if _, ok := resp.Header["X-Request-Id"]; !ok {
		out.Set("X-Request-Id", rid)
	}
	for k := range resp.Trailer {
		_ = out.AddTrailer(k)
	}
	if resp.Body == nil || resp.Body == http.NoBody { // HEAD, 204, 304, an empty body
		if resp.ContentLength >= 0 && ctx.IsHead() {
			out.SetContentLength(int(resp.ContentLength))
		}
		x.done = true
		return false
	}
	x.body, x.out = resp.Body, out
	x.remaining = -1
	cl := -1 // chunked to the client when the length is unknown
	if resp.ContentLength >= 0 {
		x.remaining, cl = resp.ContentLength, int(resp.ContentLength)
	}
	ctx.Response.SetBodyStream((*fastBody)(x), cl)
	return true
}

// copyStdTrailers gives the client an https endpoint's trailer values, also
// those it did not announce (the client's Trailer field is written already;
// the values still follow the last chunk).
func (b *fastBody) copyStdTrailers() {
	for k, vv := range b.resp.Trailer {
		if !slices.ContainsFunc(b.out.PeekTrailerKeys(), func(d []byte) bool { return equalFoldASCII(d, k) }) {
			if b.out.AddTrailer(k) != nil {
				continue
			}
		}
		for _, v := range vv {
			b.out.Add(k, v)
		}
	}
}

// fastRequestBody is the client's request body as an https endpoint's
// transport reads it: at most its length (clientBody), the client's
// trailer values taken from fasthttp at its end, and a read failure of the
// client's cancels the request (so the transport's failure does not count
// for the passive checks; the client is answered 400). The transport may
// read it on its own goroutine after the answer header: detach, at the
// exchange's end, waits for a read under way and fails those after it, so
// that nothing reads the client's connection once fasthttp does again.
type fastRequestBody struct {
	mu       sync.Mutex
	cb       clientBody
	h        *fasthttp.RequestHeader
	trailer  http.Header // the request's Trailer, filled at the body's end
	cancel   context.CancelFunc
	detached bool
	eof      atomic.Bool // read to its end: the client may be looked at
}

// errBodyDetached is a read of a request body after its exchange ended.
var errBodyDetached = errors.New("request body read after the exchange ended")

// Read reads the client's body, failing once detached.
func (b *fastRequestBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.detached {
		return 0, errBodyDetached
	}
	n, err := b.cb.Read(p)
	switch {
	case err == io.EOF && b.cb.left > 0: // shorter than its length
		b.cb.failed = true
		err = io.ErrUnexpectedEOF
	case err == io.EOF:
		for k := range b.trailer {
			for _, v := range b.h.PeekAll(k) {
				b.trailer[k] = append(b.trailer[k], string(v))
			}
		}
		b.eof.Store(true)
	}
	if b.cb.failed {
		b.cancel()
	}
	return n, err
}

// Close does nothing: the client's body is fasthttp's.
func (b *fastRequestBody) Close() error { return nil }

// failed reports whether reading the client's body failed.
func (b *fastRequestBody) failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cb.failed
}

// detach waits for a read under way and fails every read after it.
func (b *fastRequestBody) detach() {
	b.mu.Lock()
	b.detached = true
	b.mu.Unlock()
}

// fastWatch looks at a client's connection every fastClientCheckInterval
// while an https endpoint's transport waits for the answer header, once
// the request body (if any) is read to its end, and cancels the request
// when the client went away. stop ends it; no look is under way once stop
// has returned.
type fastWatch struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	gone    bool
	client  net.Conn
	body    *fastRequestBody // nil: no body
	cancel  context.CancelFunc
}

func watchClient(client net.Conn, body *fastRequestBody, cancel context.CancelFunc) *fastWatch {
	w := &fastWatch{client: client, body: body, cancel: cancel}
	w.mu.Lock()
	w.timer = time.AfterFunc(fastClientCheckInterval, w.tick)
	w.mu.Unlock()
	return w
}

func (w *fastWatch) tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if (w.body == nil || w.body.eof.Load()) && fastPeerGone(w.client) {
		w.gone = true
		w.cancel()
		return
	}
	w.timer.Reset(fastClientCheckInterval)
}

// stop ends the watch and reports whether the client went away.
func (w *fastWatch) stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	return w.gone
}
