// Package fastfront is the fasthttp front of a proxy.Proxy: a thin
// adapter that turns a request fasthttp parsed into the core's view
// (proxy.Request), forwards it by the core, and turns the core's answer
// back into fasthttp's (front.go has the whole story). gateway/proxy/front
// serves it (New), or its server (NewServer) behind the TLS front.
package fastfront

import (
	"context"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/dwara/dwara/gateway/proxy"
)

// server is a Proxy as the fasthttp front serves it: the front's methods
// on the core's Proxy. It is one pointer, so it is passed by value.
type server struct{ *proxy.Proxy }

// Handler returns the fasthttp request handler of p (its
// ServeFastHTTP), for a server with NewServer's settings.
func Handler(p *proxy.Proxy) fasthttp.RequestHandler { return server{p}.ServeFastHTTP }

// NewServerTimeouts is NewServer(p, idle) with readHeader bounding each
// request head from its first byte (0: none).
func NewServerTimeouts(p *proxy.Proxy, readHeader, idle time.Duration) *fasthttp.Server {
	fast := NewServer(p, idle)
	fast.ReadTimeout = readHeader
	return fast
}

// Front is the plain fasthttp front of a Proxy, as proxy/front serves it:
// Serve and Shutdown of one fasthttp server. Build it with New; it is
// safe for concurrent use and must not be copied.
type Front struct {
	fast     *fasthttp.Server
	maxConns int
	gate     proxy.ListenerGate
}

// New returns the plain fasthttp front of p, not yet serving: readHeader
// bounds each request head from its first byte and idle each keep-alive
// wait (0: none, and idle 0 means readHeader's bound), at most maxConns
// client connections open at once (0 or negative: no cap).
func New(p *proxy.Proxy, readHeader, idle time.Duration, maxConns int) *Front {
	return &Front{fast: NewServerTimeouts(p, readHeader, idle), maxConns: maxConns}
}

// Serve serves the connections accepted on ln, which it takes over, and
// returns nil once the listener is closed (by Shutdown, also when
// Shutdown came first), else the listener's error.
func (f *Front) Serve(ln net.Listener) error {
	ln = Listener(proxy.LimitListener(ln, f.maxConns))
	if !f.gate.Serve(ln) {
		return nil
	}
	return f.fast.Serve(ln) // nil once the listener is closed
}

// Shutdown shuts fast down, and closes the listener in case Serve had
// not started yet: fasthttp closes only the listeners it already serves.
func (f *Front) Shutdown(ctx context.Context) error {
	err := f.fast.ShutdownWithContext(ctx)
	f.gate.Close()
	return err
}

// AnswerSink returns h, a client's answer header, as the sink the core
// copies an endpoint's answer head into (proxy.CopyAnswer).
func AnswerSink(h *fasthttp.ResponseHeader) proxy.AnswerSink { return (*fastAnswer)(h) }
