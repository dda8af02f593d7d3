package h2server

import (
	"errors"
	"iter"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// run serves st's request with the handler, then ends the stream: its
// answer's end (or a reset, when the handler panicked), and, when the
// client is still sending a body nobody reads, RST_STREAM(NO_ERROR).
func (c *conn) run(st *stream) {
	w := &st.w
	w.st = st
	defer func() {
		code := http2.ErrCode(0xff) // none
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				c.s.log().Error("h2server: handler panicked", "remote", c.addr, "panic", v)
			}
			code = http2.ErrCodeInternal
		} else if err := w.finish(); err != nil && !isCut(err) {
			code = http2.ErrCodeInternal
		}
		_ = (*requestBody)(st).Close()
		freeHeader(w.hdr)
		freeHeader(st.req.Header)
		w.hdr, st.req.Header = nil, nil
		if w.buf != nil {
			w.bufBox.b = w.buf[:0]
			bodyBuffers.Put(w.bufBox)
			w.buf, w.bufBox = nil, nil
		}
		c.mu.Lock()
		c.running--
		if st.rtimer != nil {
			st.rtimer.Stop()
		}
		if st.wtimer != nil {
			st.wtimer.Stop()
		}
		switch {
		case st.err != nil: // reset or cut, and forgotten
			code = 0xff
		case code != 0xff:
		case st.remoteDone:
			c.closeLocked(st)
		default: // the client still sends a body nobody will read
			code = http2.ErrCodeNo
		}
		c.mu.Unlock()
		st.cancel()
		if code != 0xff {
			c.resetStream(st.id, code)
		}
	}()
	c.s.Handler.ServeHTTP(w, st.req)
}

// bodyBuffers are the responseWriters' buffers, kept between streams,
// each in a box of its own (a slice put in a sync.Pool would be boxed
// anew by each Put).
var bodyBuffers = sync.Pool{New: func() any { return &bodyBuffer{make([]byte, 0, handlerBuffer)} }}

type bodyBuffer struct{ b []byte }

// isCut reports whether err is a stream's end that is not the handler's
// failure: the client reset it, or the connection ended.
func isCut(err error) bool {
	var se http2.StreamError
	return errors.Is(err, errStreamReset) || errors.Is(err, errConnClosed) || errors.As(err, &se)
}

// responseWriter is the http.ResponseWriter of a stream. It holds up to
// handlerBuffer of the body until the handler returns or writes more, so
// that a small answer goes out whole in one write.
type responseWriter struct {
	st          *stream
	hdr         http.Header
	status      int
	wroteHeader bool // the status is chosen
	sentHeader  bool // the HEADERS frame is written
	noBody      bool // HEAD, 204, 304
	buf         []byte
	bufBox      *bodyBuffer // buf's, for its return to bodyBuffers
	// fields are the header's fields as they were when the status was
	// chosen: what the HEADERS frame carries, as net/http's rule has it
	// (changes after WriteHeader count only for trailers); kept in
	// fieldArr for most answers.
	fields   []field
	fieldArr [16]field
	// err is the first failure of a write (a deadline, the stream cut):
	// the answer is not whole, and finish says so.
	err error
}

// field is one header field of an answer and its values.
type field struct {
	k  string
	vv []string
}

// snapshot takes the header's fields as they are now.
func (w *responseWriter) snapshot() []field {
	fs := w.fieldArr[:0]
	for k, vv := range w.hdr {
		fs = append(fs, field{k, vv})
	}
	return fs
}

func (w *responseWriter) Header() http.Header {
	if w.hdr == nil {
		w.hdr = newHeader()
	}
	return w.hdr
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h2server: invalid status code " + strconv.Itoa(code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An interim answer (103 Early Hints): its own HEADERS, now.
		id, fs := w.st.id, w.snapshot()
		_ = w.st.c.write(func() error { return w.st.c.writeHeadersLocked(id, false, code, fs) })
		return
	}
	w.wroteHeader, w.status = true, code
	w.fields = w.snapshot()
	w.noBody = w.st.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(w.buf)+len(p) <= handlerBuffer {
		if w.buf == nil {
			w.bufBox = bodyBuffers.Get().(*bodyBuffer)
			w.buf = w.bufBox.b
		}
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	return w.send(p, false)
}

// Flush sends the header, if not yet sent, and the body held.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush, with its error (http.ResponseController).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	_, err := w.send(nil, false)
	return err
}

// SetReadDeadline bounds the handler's reads of the request body.
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	w.st.setDeadline(&w.st.rdl, &w.st.rtimer, t, &w.st.readable)
	return nil
}

// SetWriteDeadline bounds the handler's waits for the client's flow
// control (a client that takes nothing); the connection's own writes are
// bounded by the server's WriteTimeout.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.st.setDeadline(&w.st.wdl, &w.st.wtimer, t, &w.st.c.flow)
	return nil
}

// setDeadline sets the deadline *dl of st to t, with its timer *tm
// waking the waits on wake (a Cond of c.mu) when it passes.
func (st *stream) setDeadline(dl *time.Time, tm **time.Timer, t time.Time, wake *sync.Cond) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	*dl = t
	*tm = rearm(*tm, t, func() {
		c.mu.Lock()
		wake.Broadcast()
		c.mu.Unlock()
	})
}

// rearm stops tm and, for a deadline t, returns a timer that runs wake at
// t.
func rearm(tm *time.Timer, t time.Time, wake func()) *time.Timer {
	if tm != nil {
		tm.Stop()
	}
	if t.IsZero() {
		return tm
	}
	d := time.Until(t)
	if tm == nil {
		return time.AfterFunc(d, wake)
	}
	tm.Reset(d)
	return tm
}

// finish ends the answer once the handler returned: the header if not
// sent, the body held, and the trailers, the last frame flagged as the
// stream's end.
func (w *responseWriter) finish() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err // the answer is cut: the stream is reset, not ended
	}
	_, err := w.send(nil, true)
	return err
}

// send writes the header (once), the body held and p, and with end the
// trailers and the stream's end, and returns how much of p went out. Each
// DATA frame waits for the send windows first; the header goes in the
// same locked write as the first one, so an answer whose body fits the
// windows leaves in one write. A failure is kept (w.err): the answer is
// cut from there.
func (w *responseWriter) send(p []byte, end bool) (int, error) {
	st, c := w.st, w.st.c
	trailers := end && w.hasTrailers()
	pieces := [2][]byte{w.buf, p}
	sent := 0
	for i := 0; ; {
		for i < 2 && len(pieces[i]) == 0 {
			i++
		}
		var data []byte
		if i < 2 {
			n, err := st.take(len(pieces[i]))
			if err != nil {
				w.err = err
				return sent, err
			}
			data, pieces[i] = pieces[i][:n], pieces[i][n:]
		}
		more := len(pieces[0])+len(pieces[1]) > 0
		last := end && !more
		headers := !w.sentHeader
		if last {
			// Closed on this side before the frame that says so leaves:
			// a frame the client sends once it has read it finds the
			// stream closed.
			c.mu.Lock()
			st.localDone = true
			c.mu.Unlock()
		}
		err := c.write(func() error {
			if headers {
				if err := c.writeHeadersLocked(st.id, last && len(data) == 0 && !trailers, w.status, w.fields); err != nil {
					return err
				}
			}
			if len(data) > 0 || last && !trailers && !headers {
				if err := c.wf.WriteData(st.id, last && !trailers, data); err != nil {
					return err
				}
			}
			if last && trailers {
				return c.writeTrailersLocked(st.id, w.hdr)
			}
			return nil
		})
		if headers {
			w.sentHeader = true
			c.mu.Lock()
			st.answered = true
			c.mu.Unlock()
		}
		if err != nil {
			w.err = err
			return sent, err
		}
		if i == 1 {
			sent += len(data)
		}
		if !more {
			break
		}
	}
	w.buf = w.buf[:0]
	return sent, nil
}

// hasTrailers reports whether the handler set trailer values: names
// declared in its Trailer field, or prefixed with http.TrailerPrefix.
func (w *responseWriter) hasTrailers() bool {
	for k := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	for name := range declaredTrailers(w.hdr) {
		if _, ok := w.hdr[name]; ok {
			return true
		}
	}
	return false
}

// declaredTrailers yields the names h's Trailer field declares, in
// canonical form.
func declaredTrailers(h http.Header) iter.Seq[string] {
	return func(yield func(string) bool) {
		for _, v := range h["Trailer"] {
			for name := range strings.SplitSeq(v, ",") {
				if name = strings.TrimSpace(name); name != "" && !yield(http.CanonicalHeaderKey(name)) {
					return
				}
			}
		}
	}
}

// take waits until st may send up to want bytes of DATA (one frame's
// worth at most) and takes them off both send windows.
func (st *stream) take(want int) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case st.err != nil:
			return 0, st.err
		case c.closed:
			return 0, errConnClosed
		case !st.wdl.IsZero() && !time.Now().Before(st.wdl):
			return 0, os.ErrDeadlineExceeded
		}
		n := min(int64(want), int64(c.peerFrame.Load()), st.send, c.sendWindow)
		if n > 0 {
			st.send -= n
			c.sendWindow -= n
			return int(n), nil
		}
		c.flow.Wait()
	}
}

// writeHeadersLocked writes a HEADERS frame (and CONTINUATIONs) for
// stream id: the status and the fields; c.wmu is held.
func (c *conn) writeHeadersLocked(id uint32, end bool, status int, fields []field) error {
	c.hbuf = c.hbuf[:0]
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	date := false
	for _, f := range fields {
		switch f.k {
		case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade":
			continue
		case "Date":
			date = true
		}
		if strings.HasPrefix(f.k, http.TrailerPrefix) {
			continue
		}
		c.encode(f.k, f.vv)
	}
	if !date && status >= 200 {
		_ = c.henc.WriteField(hpack.HeaderField{Name: "date", Value: httpDate()})
	}
	return c.writeBlockLocked(id, end)
}

// writeTrailersLocked writes the trailers of stream id, ending it: the
// values of h whose names its Trailer field declared or that carry
// http.TrailerPrefix; c.wmu is held.
func (c *conn) writeTrailersLocked(id uint32, h http.Header) error {
	c.hbuf = c.hbuf[:0]
	declared := map[string]bool{}
	for name := range declaredTrailers(h) {
		declared[name] = true
	}
	for k, vv := range h {
		name, ok := strings.CutPrefix(k, http.TrailerPrefix)
		if !ok && !declared[k] {
			continue
		}
		c.encode(name, vv)
	}
	return c.writeBlockLocked(id, true)
}

// writeBlockLocked writes the header block in c.hbuf for stream id: a
// HEADERS frame, and CONTINUATIONs past the client's frame size.
func (c *conn) writeBlockLocked(id uint32, end bool) error {
	block := c.hbuf
	max := int(c.peerFrame.Load())
	first := block[:min(len(block), max)]
	block = block[len(first):]
	if err := c.wf.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first,
		EndStream: end, EndHeaders: len(block) == 0}); err != nil {
		return err
	}
	for len(block) > 0 {
		frag := block[:min(len(block), max)]
		block = block[len(frag):]
		if err := c.wf.WriteContinuation(id, len(block) == 0, frag); err != nil {
			return err
		}
	}
	return nil
}

// encode adds the field k (canonical) with its values to c.hbuf; c.wmu
// is held. The values of a request id and of a new session's cookie,
// new in every answer, are not indexed: each would take a place of the
// dynamic table only to push out one that will be used again (and a
// cookie is no value to keep in a compression context anyway).
func (c *conn) encode(k string, vv []string) {
	once := k == "X-Request-Id" || k == "Set-Cookie"
	if once {
		name := commonLower[k]
		for _, v := range vv {
			_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v, Sensitive: true})
		}
		return
	}
	name, ok := commonLower[k]
	if !ok {
		// Names the handler writes on every answer (the endpoint's own)
		// are lowered once a connection, up to maxLowered of them.
		if name, ok = c.lowered[k]; !ok {
			name = strings.ToLower(k)
			if c.lowered == nil {
				c.lowered = make(map[string]string)
			}
			if len(c.lowered) < maxLowered {
				c.lowered[k] = name
			}
		}
	}
	for _, v := range vv {
		_ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: v})
	}
}

// statusText is the :status value of code.
func statusText(code int) string {
	if code >= 100 && code < 600 {
		if s := statusTexts[code-100]; s != "" {
			return s
		}
	}
	return strconv.Itoa(code)
}

var statusTexts = func() (t [500]string) {
	for i := range t {
		t[i] = strconv.Itoa(i + 100)
	}
	return t
}()

// commonNames maps the canonical form of common field names to their
// HTTP/2 (lower-case) form, and back, so that neither is made per request.
var commonLower, commonCanonical = func() (map[string]string, map[string]string) {
	lower, canon := map[string]string{}, map[string]string{}
	for _, k := range []string{"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Age", "Access-Control-Allow-Origin", "Allow", "Authorization", "Cache-Control", "Content-Disposition",
		"Content-Encoding", "Content-Language", "Content-Length", "Content-Location", "Content-Range",
		"Content-Type", "Cookie", "Date", "Etag", "Expect", "Expires", "From", "Host", "If-Match",
		"If-Modified-Since", "If-None-Match", "If-Range", "If-Unmodified-Since", "Last-Modified", "Link",
		"Location", "Max-Forwards", "Origin", "Proxy-Authenticate", "Proxy-Authorization", "Range", "Referer",
		"Refresh", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Te", "Trailer",
		"User-Agent", "Vary", "Via", "Www-Authenticate", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Request-Id", "X-Content-Type-Options", "X-Frame-Options", "Priority",
		"Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-User", "Upgrade-Insecure-Requests",
		"Sec-Ch-Ua", "Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform", "Dnt", "Pragma", "X-Requested-With"} {
		l := strings.ToLower(k)
		lower[k], canon[l] = l, k
	}
	return lower, canon
}()

// maxLowered bounds a connection's cache of lowered field names.
const maxLowered = 64

// canonical is the canonical form of the HTTP/2 field name l.
func canonical(l string) string {
	if k, ok := commonCanonical[l]; ok {
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(l)
}

// dateNow is the Date value of the current second, made once a second.
var dateNow atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := dateNow.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	dateNow.Store(d)
	return d.s
}
