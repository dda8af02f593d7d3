package httpfront

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
)

// statusWriter records the status code written through it. It forwards
// Flush, Hijack and the rest through Unwrap (http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	code int
	// body is the stall-guarded reader of the request body, when the
	// forwarding path installs one (so that it does not allocate).
	body proxy.StallBody
	// out is the core's view of the request (httpOutbound), kept here so
	// that filling it does not allocate.
	out proxy.Request
	// values holds the values of the endpoint's fields as CopyAnswer adds
	// them (stdAnswer): one slice per answer for all of them.
	values []string
	// text and fields hold the endpoint's fields from CopyAnswer's Field
	// to its End (stdAnswer): their values one after the other in text,
	// which End makes one string of; kept with the pooled writer.
	text   []byte
	fields []pendingField
	// req is the request served, and stall the stall timeout, for
	// RequestBody.
	req   *http.Request
	stall time.Duration
}

// RequestBody is the request's body as a route that reads it reads it
// (proxy.BodySource): under the stall timeout, as forward reads it.
func (w *statusWriter) RequestBody() io.Reader {
	if dl, ok := w.ResponseWriter.(proxy.Deadliner); ok && w.stall > 0 {
		w.body = proxy.StallBody{R: w.req.Body, DL: dl, Stall: w.stall}
		return &w.body
	}
	return w.req.Body
}

// maxKeptText and maxKeptFields bound what a pooled writer keeps of the
// buffers of the last answer's fields (statusWriter.text and fields).
const (
	maxKeptText   = 8 << 10
	maxKeptFields = 64
)

var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

func getStatusWriter(w http.ResponseWriter) *statusWriter {
	sw := statusWriters.Get().(*statusWriter)
	sw.ResponseWriter, sw.code = w, 0
	return sw
}

func putStatusWriter(sw *statusWriter) {
	sw.ResponseWriter = nil
	sw.body = proxy.StallBody{}
	sw.out.Reset()
	sw.values = nil
	if cap(sw.text) > maxKeptText || cap(sw.fields) > maxKeptFields {
		sw.text, sw.fields = nil, nil // an answer with a head out of the common
	}
	sw.text, sw.fields = sw.text[:0], sw.fields[:0]
	sw.req = nil
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

// writeProblem writes an RFC 9457 problem+json answer.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(proxy.ProblemJSON(status, title, detail)))
}
