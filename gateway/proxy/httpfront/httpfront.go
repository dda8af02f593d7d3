// Package httpfront is the net/http front of a proxy.Proxy: a thin
// adapter that turns a request Go's net/http server parsed into the core's
// view (proxy.Request), forwards it by the core, and writes the core's
// answer back through the http.ResponseWriter (Handler). It serves HTTP/2
// (by ALPN with TLS, h2c without), checks the request heads of plain
// connections before the server parses them (HeadCheckListener), and
// relays upgrades. gateway/proxy/front serves it (New), and its server
// serves the HTTP/2 connections of the fasthttp front's TLS.
package httpfront

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
)

// Front is a front of a net/http server, as proxy/front serves it: the
// net/http front of a Proxy (New) or a server of another handler
// (NewServerFront). It is safe for concurrent use and must not be copied.
type Front struct {
	srv      *http.Server
	maxConns int
	// checkHeads: srv serves the Proxy as plain HTTP, its connections read
	// through HeadCheckListener.
	checkHeads bool
}

// NewServerFront returns srv as a Front: plain, or with tlsConfig
// (nil: plain) TLS 1.2+ with HTTP/2 and HTTP/1.1 by ALPN, as the net/http
// front serves them; at most maxConns connections open at once (0 or
// negative: no cap). It sets srv's TLSConfig (a copy of tlsConfig),
// Protocols and HTTP2; the caller sets the rest (handler, timeouts)
// before Serve. Past Shutdown's ctx the remaining connections are closed.
// It is for listeners of a process that serve no proxy (an API, metrics);
// a Proxy is served with New, which checks request heads.
func NewServerFront(srv *http.Server, tlsConfig *tls.Config, maxConns int) *Front {
	return newFront(srv, tlsConfig, maxConns, false)
}

// New returns the net/http front of p, not yet serving: its server
// (NewServer with readHeader and idle), plain HTTP with request heads
// checked (HeadCheckListener) and h2c, or with tlsConfig (nil: plain)
// TLS with HTTP/2 and HTTP/1.1 by ALPN; at most maxConns connections open
// at once (0 or negative: no cap). Past Shutdown's ctx the remaining
// connections are closed.
func New(p *proxy.Proxy, readHeader, idle time.Duration, tlsConfig *tls.Config, maxConns int) *Front {
	return newFront(NewServer(p, readHeader, idle), tlsConfig, maxConns, true)
}

// newFront is the front of srv; checkHeads reads plain connections
// through HeadCheckListener (for a server of the Proxy).
func newFront(srv *http.Server, tlsConfig *tls.Config, maxConns int, checkHeads bool) *Front {
	if tlsConfig != nil {
		// ServeTLS sets NextProtos from Protocols on its own copy.
		srv.TLSConfig = tlsConfig.Clone()
		srv.Protocols = HTTP1And2()
		srv.HTTP2 = HTTP2Config()
		checkHeads = false // the server must see *tls.Conn
	}
	return &Front{srv: srv, maxConns: maxConns, checkHeads: checkHeads}
}

// Serve serves the connections accepted on ln, which it takes over, and
// returns nil once Shutdown closed it, else the listener's error.
func (f *Front) Serve(ln net.Listener) error {
	ln = proxy.LimitListener(ln, f.maxConns)
	var err error
	switch {
	case f.srv.TLSConfig != nil:
		err = f.srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
	case f.checkHeads:
		err = f.srv.Serve(HeadCheckListener(ln))
	default:
		err = f.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown shuts srv down gracefully within ctx, and closes it past ctx.
func (f *Front) Shutdown(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	if err != nil {
		_ = f.srv.Close()
	}
	return err
}

// NewServer is a net/http server of the proxy p: readHeader bounds each
// request head, idle each keep-alive wait (0: none); no
// read or write timeout (bodies and answers stream for as long as they
// move; the proxy's stall timeout ends those that do not), and request
// heads capped as on the other fronts (431 over MaxHeadBytes).
func NewServer(p *proxy.Proxy, readHeader, idle time.Duration) *http.Server {
	return &http.Server{
		Handler:           server{p},
		ReadHeaderTimeout: readHeader,
		IdleTimeout:       idle,
		MaxHeaderBytes:    MaxHeadBytes,
		ConnContext:       joinerContext,
	}
}

// An HTTP/2 answer whose body is in memory when the handler returns (up
// to the server's 4 KiB buffer of a stream) goes out as a HEADERS frame
// and a DATA frame, and Go's server writes each in a TLS record of its
// own: the handler waits until the first is written before it hands over
// the second, and the server flushes whenever nothing else is queued.
// Where the connection under the TLS can hold a write for the one after
// it (a writeJoiner: the fasthttp front's, fastfront.FirstHeadConn), the
// handler asks it to, and the two records go out in one write, as
// nginx's do (docs/performance.md has the counts).

// writeJoiner is a connection that can hold its next write and make it
// with the one after.
type writeJoiner interface{ JoinNextWrite() }

// joinerKey is the context key of a connection's writeJoiner.
type joinerKey struct{}

// joinMax is the largest body whose answer is joined: its two records
// must fit the joiner's buffer (1 KiB) with the head's.
const joinMax = 512

// joinerContext is the ConnContext of the fronts' servers: ctx with the
// writeJoiner under c's TLS, if it has one.
func joinerContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		if j, ok := tc.NetConn().(writeJoiner); ok {
			return context.WithValue(ctx, joinerKey{}, j)
		}
	}
	return ctx
}

// joinAnswer asks the connection of r, an HTTP/2 request whose answer's
// body is all written, to write the answer's two frames in one call.
func joinAnswer(r *http.Request) {
	if j, ok := r.Context().Value(joinerKey{}).(writeJoiner); ok {
		j.JoinNextWrite()
	}
}

// MaxReadFrameSize is the largest HTTP/2 frame the fronts' net/http
// servers read: the protocol's initial SETTINGS_MAX_FRAME_SIZE (RFC 9113,
// section 6.5.2), which every peer must be able to send within, instead of
// Go's 1 MiB. Go's framer keeps a read buffer per connection as large as
// the largest frame it has read, so this bounds it at 16 KiB rather than
// letting each client grow it to 1 MiB; and a header block over it gets
// the FRAME_SIZE_ERROR h2spec expects (its case 4.2 #3 sends a 20 KB
// HEADERS frame, taking 16 KiB for the limit whatever the server
// announced).
const MaxReadFrameSize = 16 << 10

// HTTP2Config is the HTTP/2 configuration of every server that serves it:
// Go's defaults but for MaxReadFrameSize.
func HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{MaxReadFrameSize: MaxReadFrameSize}
}

// HTTP1And2 is the protocol set of a net/http server that serves TLS:
// HTTP/1.1 and HTTP/2, chosen by ALPN.
func HTTP1And2() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	return p
}

// server is a Proxy as the net/http front serves it: the front's methods
// on the core's Proxy. It is one pointer, so it is passed by value.
type server struct{ *proxy.Proxy }

// Handler returns the net/http handler of p: each request routed and
// proxied as on the net/http front (its ServeHTTP).
func Handler(p *proxy.Proxy) http.Handler { return server{p} }

// AnswerSink returns w as the sink the core copies an endpoint's answer
// head into (proxy.CopyAnswer): the fields into w's header, the status
// written at the end.
func AnswerSink(w http.ResponseWriter) proxy.AnswerSink {
	return (*stdAnswer)(&statusWriter{ResponseWriter: w})
}
