package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// statusWriter records the status code written through it. It forwards
// Flush, Hijack and the rest through Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	code int
	// body is the stall-guarded reader of the request body, when the
	// forwarding path installs one (so that it does not allocate).
	body stallBody
	// out is the core's view of the request (httpOutbound), kept here so
	// that filling it does not allocate.
	out outbound
	// values holds the values of the endpoint's fields as copyAnswer adds
	// them (stdAnswer): one slice per answer for all of them.
	values []string
}

// deadliner is what the standard library's response writer offers for
// per-request deadlines on the client connection.
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// stallBody reads a client's request body with a read deadline that moves
// forward before every read: a body that makes no progress for stall ends
// with a timeout, one that keeps coming is never cut. dl is the net/http
// front's response writer, or the fasthttp front's request (which puts
// its own deadline back after the request).
type stallBody struct {
	r     io.Reader
	dl    deadliner
	stall time.Duration
}

func (b *stallBody) Read(p []byte) (int, error) {
	_ = b.dl.SetReadDeadline(time.Now().Add(b.stall))
	return b.r.Read(p)
}

// Close closes the body read, when it can be closed.
func (b *stallBody) Close() error {
	if c, ok := b.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func getStatusWriter(w http.ResponseWriter) *statusWriter {
	sw := statusWriters.Get().(*statusWriter)
	sw.ResponseWriter, sw.code = w, 0
	return sw
}

func putStatusWriter(sw *statusWriter) {
	sw.ResponseWriter = nil
	sw.body = stallBody{}
	sw.out.reset()
	sw.values = nil
	statusWriters.Put(sw)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 || (w.code >= 100 && w.code < 200) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streamed responses through without waiting for the buffer.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack takes over the client connection for an upgrade, whose 101 the
// tunnel writes straight on the connection (upgrade.go): a successful
// hijack records that status.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil && w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	return c, brw, err
}

// bufferPool is the copy-buffer pool of the answers and tunnels. It
// is a channel of buffers rather than a sync.Pool so that returning a buffer
// does not allocate an interface box.
type bufferPool struct{ free chan []byte }

const copyBufferSize = 32 << 10

func newBufferPool(n int) *bufferPool { return &bufferPool{free: make(chan []byte, n)} }

func (p *bufferPool) Get() []byte {
	select {
	case b := <-p.free:
		return b
	default:
		return make([]byte, copyBufferSize)
	}
}

func (p *bufferPool) Put(b []byte) {
	if cap(b) != copyBufferSize {
		return
	}
	select {
	case p.free <- b[:copyBufferSize]:
	default:
	}
}

// writeProblem writes an RFC 9457 problem+json answer.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(problemJSON(status, title, detail)))
}

// problemJSON is the body of an RFC 9457 problem+json answer.
func problemJSON(status int, title, detail string) string {
	return `{"type":"about:blank","title":` + strconv.Quote(title) +
		`,"status":` + strconv.Itoa(status) + `,"detail":` + strconv.Quote(detail) + `}`
}
