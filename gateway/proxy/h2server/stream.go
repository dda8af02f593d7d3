package h2server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// stream is one request and its answer. Its fields are guarded by the
// connection's mu, which its body's reads and writes take too.
type stream struct {
	c   *conn
	id  uint32
	req *http.Request
	// url is req.URL, made with the stream (one allocation fewer).
	url url.URL

	send       int64 // the send window
	recv       int64 // what is left of the receive window
	unacked    int64 // bytes read by the handler not yet given back
	remoteDone bool  // END_STREAM received: the client's half is closed
	localDone  bool  // the answer is over (END_STREAM sent, or reset)
	err        error // why it was cut, if it was
	declared   int64 // the request's Content-Length, -1 for none
	received   int64 // body bytes received

	// body holds what the client sent and the handler has not read yet,
	// from off; bodyErr ends the reads once it is drained (io.EOF after
	// END_STREAM); unread is set once the handler is done with the body.
	body     []byte
	off      int
	bodyErr  error
	unread   bool
	readable sync.Cond
	// trailers are the request's trailer fields, copied into req.Trailer
	// by the handler's own read that meets the end of the body.
	trailers http.Header
	// expect is a request with Expect: 100-continue whose handler has not
	// read its body yet: the first read sends the 100, unless the answer's
	// header went out already (answered).
	expect   bool
	answered bool
	rdl, wdl time.Time // the handler's read and write deadlines
	rtimer   *time.Timer
	wtimer   *time.Timer

	// ctx is the request's context; parentStop undoes the watch of the
	// connection's context, when that one can end.
	ctx        streamContext
	parentStop func() bool

	w responseWriter // the handler's, made with the stream
}

// cut ends st with err: its reads and writes fail from now on. c.mu is
// held; the caller forgets it (closeLocked).
func (st *stream) cut(err error) {
	if st.err == nil {
		st.err = err
	}
	st.localDone, st.remoteDone = true, true
	if st.bodyErr == nil {
		st.bodyErr = err
	}
	st.cancel()
	st.readable.Broadcast()
}

// cancel ends st's context.
func (st *stream) cancel() {
	if st.parentStop != nil {
		st.parentStop()
	}
	st.ctx.cancel()
}

// endRemote closes the client's half of st (END_STREAM); c.mu is held.
func (st *stream) endRemote() {
	st.remoteDone = true
	if st.bodyErr == nil {
		st.bodyErr = io.EOF
	}
	st.readable.Broadcast()
	if st.localDone {
		st.c.closeLocked(st)
	}
}

// headers acts on a HEADERS frame (with its CONTINUATIONs): a new stream,
// or the trailers of an open one.
func (c *conn) headers(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // only clients open streams, odd ones
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		return c.trailers(st, f) // unlocks
	}
	if id <= c.maxID {
		ignore := c.wasReset(id)
		c.mu.Unlock()
		if ignore {
			return nil
		}
		return http2.ConnectionError(http2.ErrCodeProtocol) // not above every stream opened (section 5.1.1)
	}
	c.maxID = id
	var refuse http2.ErrCode = 0xff
	switch {
	case c.goingAway:
		refuse = http2.ErrCodeRefusedStream
	case f.HasPriority() && f.Priority.StreamDep == id:
		refuse = http2.ErrCodeProtocol
	case c.running >= 2*int(c.s.maxStreams()):
		// Streams reset while their handlers still run: a client that
		// keeps opening and resetting them (CVE-2023-44487).
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	case c.open >= int(c.s.maxStreams()):
		refuse = http2.ErrCodeRefusedStream
	}
	if refuse != 0xff {
		c.mu.Unlock()
		c.resetStream(id, refuse)
		return nil
	}
	c.mu.Unlock()
	if f.Truncated {
		return c.answerOnly(id, http.StatusRequestHeaderFieldsTooLarge)
	}
	st := &stream{c: c, id: id, recv: streamWindow}
	var r http.Request // WithContext's copy below is the stream's: r stays on the stack
	declared, err := c.request(f, &st.url, &r)
	if err != nil {
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	st.declared = declared
	st.expect = !f.StreamEnded() && strings.EqualFold(r.Header.Get("Expect"), "100-continue")
	st.readable.L = &c.mu
	st.ctx.parent = c.ctx
	if c.ctx.Done() != nil {
		st.parentStop = context.AfterFunc(c.ctx, st.ctx.cancel)
	}
	req := r.WithContext(&st.ctx)
	st.req = req
	if f.StreamEnded() {
		if declared > 0 {
			st.cancel()
			c.resetStream(id, http2.ErrCodeProtocol)
			return nil
		}
		req.Body, req.ContentLength = http.NoBody, 0
	} else {
		req.Body, req.ContentLength = (*requestBody)(st), declared
	}
	c.mu.Lock()
	if c.closed || c.goingAway {
		c.mu.Unlock()
		st.cancel()
		c.resetStream(id, http2.ErrCodeRefusedStream)
		return nil
	}
	st.send = c.peerWindow
	c.streams[id] = st
	c.open++
	c.running++
	first := c.open == 1
	if f.StreamEnded() {
		st.remoteDone, st.bodyErr = true, io.EOF
	}
	c.mu.Unlock()
	if first && c.s.IdleTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Time{})
	}
	c.s.workers.run(st)
	return nil
}

// trailers takes the trailing HEADERS of st, which end its request;
// c.mu is held, and released.
func (c *conn) trailers(st *stream, f *http2.MetaHeadersFrame) error {
	if st.remoteDone && st.localDone {
		// Closed both ways (its handler not yet gone): a connection
		// error (RFC 9113, section 5.1, "closed").
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	if st.remoteDone { // half-closed (remote): a stream error
		c.mu.Unlock()
		c.resetStream(st.id, http2.ErrCodeStreamClosed)
		return nil
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		c.mu.Unlock()
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	if st.declared >= 0 && st.received != st.declared {
		c.mu.Unlock()
		c.resetStream(st.id, http2.ErrCodeProtocol)
		return nil
	}
	for _, hf := range f.RegularFields() {
		k := canonical(hf.Name)
		if st.trailers == nil {
			st.trailers = make(http.Header)
		}
		st.trailers[k] = append(st.trailers[k], hf.Value)
	}
	st.endRemote()
	c.mu.Unlock()
	return nil
}

// errMalformed is a request that breaks RFC 9113, section 8.
var errMalformed = errors.New("h2server: malformed request")

// request makes in req the http.Request of a new stream's HEADERS, its URL
// in u, and returns its Content-Length (-1 for none); a malformed request
// is an error. Its Header is a map of headerMaps, which run gives back.
func (c *conn) request(f *http2.MetaHeadersFrame, u *url.URL, req *http.Request) (int64, error) {
	var method, path, scheme, authority string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":path":
			path = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		default: // :protocol (extended CONNECT) is not served
			return 0, errMalformed
		}
	}
	switch {
	case method == "":
		return 0, errMalformed
	case method == http.MethodConnect:
		if path != "" || scheme != "" || authority == "" {
			return 0, errMalformed
		}
		*u = url.URL{Host: authority}
	case path == "" || scheme == "":
		return 0, errMalformed
	case path == "*":
		if method != http.MethodOptions {
			return 0, errMalformed
		}
		*u = url.URL{Path: "*"}
	case path[0] != '/':
		return 0, errMalformed
	case plainPath(u, path):
	default:
		pu, err := url.ParseRequestURI(path)
		if err != nil {
			return 0, errMalformed
		}
		*u = *pu
	}
	regular := f.RegularFields()
	h := newHeader()
	// One array holds the first value of each name: one allocation, not
	// one a field.
	values := make([]string, len(regular))
	var cookies []string
	for i, hf := range regular {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return 0, errMalformed // connection-specific (section 8.2.2)
		case "te":
			if hf.Value != "trailers" {
				return 0, errMalformed
			}
		case "cookie":
			cookies = append(cookies, hf.Value)
			continue
		}
		k := canonical(hf.Name)
		if vv, ok := h[k]; ok {
			h[k] = append(vv, hf.Value)
		} else {
			values[i] = hf.Value
			h[k] = values[i : i+1 : i+1]
		}
	}
	if len(cookies) > 0 {
		h["Cookie"] = []string{strings.Join(cookies, "; ")} // section 8.2.3
	}
	declared := int64(-1)
	if vv := h["Content-Length"]; len(vv) > 0 {
		for _, v := range vv[1:] {
			if v != vv[0] {
				return 0, errMalformed
			}
		}
		n, err := strconv.ParseUint(vv[0], 10, 63)
		if err != nil {
			return 0, errMalformed
		}
		declared = int64(n)
		if len(vv) > 1 {
			h["Content-Length"] = vv[:1]
		}
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	delete(h, "Host")
	*req = http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: h, Host: authority, RemoteAddr: c.addr, RequestURI: path, TLS: c.tls,
	}
	if method == http.MethodConnect {
		req.RequestURI = authority
	}
	for name := range declaredTrailers(h) {
		if req.Trailer == nil {
			req.Trailer = make(http.Header)
		}
		req.Trailer[name] = nil
	}
	return declared, nil
}

// data acts on a DATA frame: the bytes go to the stream's body, within
// the receive windows.
func (c *conn) data(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Header().Length)
	data := f.Data()
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.remoteDone {
		idle := st == nil && id > c.maxID
		ignore := st == nil && c.wasReset(id)
		c.mu.Unlock()
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		// Frames to a stream that ended still count on the connection's
		// window: give them back.
		c.giveBack(0, 0, n)
		if !ignore {
			c.resetStream(id, http2.ErrCodeStreamClosed)
		}
		return nil
	}
	if n > st.recv {
		c.mu.Unlock()
		c.giveBack(0, 0, n)
		c.resetStream(id, http2.ErrCodeFlowControl)
		return nil
	}
	st.recv -= n
	if len(data) == 0 && !f.StreamEnded() {
		if c.emptyData++; c.emptyData > 100 {
			c.mu.Unlock()
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	} else {
		c.emptyData = 0
	}
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || f.StreamEnded() && st.received != st.declared) {
		c.mu.Unlock()
		c.giveBack(0, 0, n)
		c.resetStream(id, http2.ErrCodeProtocol)
		return nil
	}
	back := n - int64(len(data)) // padding: back to both windows at once
	var sn int64
	if st.unread {
		back = n // the handler is done with the body: dropped
	} else {
		st.body = append(st.body, data...)
		st.readable.Broadcast()
	}
	if back > 0 && !f.StreamEnded() {
		st.unacked += back
		if st.unacked >= streamWindow/4 {
			sn, st.unacked = st.unacked, 0
			st.recv += sn
		}
	}
	if f.StreamEnded() {
		st.endRemote()
	}
	c.mu.Unlock()
	if back > 0 || sn > 0 {
		c.giveBack(id, sn, back)
	}
	return nil
}

// giveBack returns n bytes to the connection's receive window (and sn to
// stream id's, when id is not 0) once enough has gathered to be worth a
// WINDOW_UPDATE.
func (c *conn) giveBack(id uint32, sn, n int64) {
	c.mu.Lock()
	c.recvUnacked += n
	var cn int64
	if c.recvUnacked >= connWindow/4 {
		cn, c.recvUnacked = c.recvUnacked, 0
		c.recvWindow += cn
	}
	c.mu.Unlock()
	if cn == 0 && sn == 0 {
		return
	}
	_ = c.control(func() error {
		if cn > 0 {
			if err := c.wf.WriteWindowUpdate(0, uint32(cn)); err != nil {
				return err
			}
		}
		if sn > 0 {
			return c.wf.WriteWindowUpdate(id, uint32(sn))
		}
		return nil
	})
}

// requestBody is a stream's request body, as its handler reads it.
type requestBody stream

// Read reads what the client sent, waiting for it within the read
// deadline (SetReadDeadline of the stream's ResponseWriter).
func (b *requestBody) Read(p []byte) (int, error) {
	st := (*stream)(b)
	c := st.c
	c.mu.Lock()
	if st.expect {
		st.expect = false
		if !st.answered && st.err == nil {
			c.mu.Unlock()
			id := st.id
			_ = c.write(func() error { return c.writeHeadersLocked(id, false, http.StatusContinue, nil) })
			c.mu.Lock()
		}
	}
	for st.off == len(st.body) && st.bodyErr == nil {
		if !st.rdl.IsZero() && !time.Now().Before(st.rdl) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		st.readable.Wait()
	}
	if st.off == len(st.body) {
		err, trailers := st.bodyErr, st.trailers
		st.trailers = nil
		c.mu.Unlock()
		if errors.Is(err, io.EOF) {
			for k, vv := range trailers {
				if st.req.Trailer == nil {
					st.req.Trailer = make(http.Header)
				}
				st.req.Trailer[k] = vv
			}
			return 0, io.EOF
		}
		return 0, err
	}
	n := copy(p, st.body[st.off:])
	st.off += n
	if st.off == len(st.body) {
		st.body, st.off = st.body[:0], 0
	}
	var sn int64
	if !st.remoteDone {
		st.unacked += int64(n)
		if st.unacked >= streamWindow/4 {
			sn, st.unacked = st.unacked, 0
			st.recv += sn
		}
	}
	c.mu.Unlock()
	c.giveBack(st.id, sn, int64(n))
	return n, nil
}

// Close ends the handler's reading: what the client sends from now on is
// dropped, and what it sent unread is given back.
func (b *requestBody) Close() error {
	st := (*stream)(b)
	c := st.c
	c.mu.Lock()
	if st.unread {
		c.mu.Unlock()
		return nil
	}
	st.unread = true
	left := int64(len(st.body) - st.off)
	st.body, st.off = nil, 0
	c.mu.Unlock()
	if left > 0 {
		c.giveBack(0, 0, left)
	}
	return nil
}

// answerOnly answers a new stream id with status and nothing else (the
// client's half stays open until it ends it or the connection does).
func (c *conn) answerOnly(id uint32, status int) error {
	err := c.write(func() error { return c.writeHeadersLocked(id, true, status, nil) })
	if err == nil {
		_ = c.write(func() error { return c.wf.WriteRSTStream(id, http2.ErrCodeNo) })
	}
	return nil
}
