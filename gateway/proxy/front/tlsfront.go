package front

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/fastfront"
)

// tlsFront is the fasthttp front with TLS. fasthttp speaks HTTP/1.1 only:
// the front accepts the listener's connections, does their TLS handshakes
// itself and hands each connection, by the protocol ALPN chose, to one of
// two servers of the same proxy: "h2" to a net/http server (HTTP/2), anything else
// ("http/1.1", or no ALPN) to the fasthttp server. Each of the two accepts
// from a connQueue of its own.
//
// The accept loop never handshakes: each handshake runs in a goroutine of
// its own, bounded by timeout, so a client that connects and never
// finishes its handshake holds a goroutine (and a connection slot of the
// listener) for that long at most. Closing the front aborts the handshakes
// under way: their clients have sent no request yet.
type tlsFront struct {
	config   *tls.Config
	timeout  time.Duration // of each handshake; 0: none
	maxConns int           // of the listener (limit)
	log      *slog.Logger
	fast     fastServer
	h2       h2Server
	gate     proxy.ListenerGate
	// ln is the listener Serve accepts from, capped by limit, set by Serve
	// before its acceptor starts.
	ln  net.Listener
	h1q *connQueue // fast accepts from it
	h2q *connQueue // h2 accepts from it

	mu          sync.Mutex
	closed      bool
	handshaking map[net.Conn]struct{}
	// handshakes counts the handshake goroutines; only Serve's goroutine
	// adds to it and waits for it.
	handshakes sync.WaitGroup
}

// fastServer is what the TLS front needs of the fasthttp server
// (*fasthttp.Server has it), so that this package names no fasthttp.
type fastServer interface {
	Serve(ln net.Listener) error
	ShutdownWithContext(ctx context.Context) error
}

// newTLSFront returns the TLS front of the fasthttp server fast, with
// config (which must offer "h2" and "http/1.1" by ALPN), each handshake
// bounded by timeout and at most maxConns connections open (limit). h2
// serves the connections that negotiate HTTP/2; it must serve HTTP/2 on a
// listener of *tls.Conn (see newFastFront).
func newTLSFront(config *tls.Config, timeout time.Duration, maxConns int, log *slog.Logger, fast fastServer, h2 h2Server) *tlsFront {
	return &tlsFront{
		config: config, timeout: timeout, maxConns: maxConns, log: log, fast: fast, h2: h2,
		// Their address is the listener's, known once Serve is called.
		h1q:         newConnQueue(nil),
		h2q:         newConnQueue(nil),
		handshaking: make(map[net.Conn]struct{}),
	}
}

// Serve serves ln until it is closed (by Shutdown) or fails, and returns
// once its acceptor, its handshakes and the Serve calls of both servers
// have returned: nil when the listener was closed (or Shutdown came
// first), else the error. Connections the servers already serve are
// Shutdown's to end.
func (f *tlsFront) Serve(ln net.Listener) error {
	ln = proxy.LimitListener(ln, f.maxConns)
	if !f.gate.Serve(ln) {
		return nil
	}
	// Set before the servers that read them start; close reads neither.
	f.ln, f.h1q.addr, f.h2q.addr = ln, ln.Addr(), ln.Addr()
	served := make(chan error, 2)
	go func() { served <- f.fast.Serve(f.h1q) }() // nil once h1q is closed
	go func() { served <- f.h2.Serve(f.h2q) }()
	err := f.accept()
	f.close()
	f.handshakes.Wait()
	for range 2 {
		if e := <-served; err == nil && e != nil && !errors.Is(e, http.ErrServerClosed) && !errors.Is(e, net.ErrClosed) {
			err = e
		}
	}
	return err
}

// accept hands each connection of the listener to a handshake goroutine
// until the listener is closed (nil) or fails with an error that is not
// temporary. After a temporary one (too many open files) it waits, 5 ms
// doubling up to 1 s, as net/http's Serve does.
func (f *tlsFront) accept() error {
	var delay time.Duration
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			if te, ok := err.(interface{ Temporary() bool }); !ok || !te.Temporary() {
				return err
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			f.log.Warn("accept failed; retrying", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		f.handshakes.Add(1)
		go f.handshake(c)
	}
}

// handshake does the TLS handshake of raw within f.timeout and hands the
// connection to the server of the protocol it negotiated; it closes raw
// when the handshake fails or the front is closed.
func (f *tlsFront) handshake(raw net.Conn) {
	defer f.handshakes.Done()
	if !f.track(raw, true) {
		_ = raw.Close()
		return
	}
	// The fasthttp front bounds an HTTP/1.1 connection's first request
	// head through a FirstHeadConn under its TLS session; an h2 one's
	// deadlines are net/http's to set, unchanged.
	fc := fastfront.NewFirstHeadConn(raw)
	tc := tls.Server(fc, f.config)
	var err error
	if f.timeout > 0 {
		err = raw.SetDeadline(time.Now().Add(f.timeout))
	}
	if err == nil {
		err = tc.Handshake()
	}
	f.track(raw, false)
	if err == nil {
		err = raw.SetDeadline(time.Time{}) // the servers set their own
	}
	if err != nil {
		f.log.Debug("tls handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		_ = raw.Close()
		return
	}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		fc.Release()
		f.h2q.deliver(tc)
	} else {
		f.h1q.deliver(tc)
	}
}

// track adds c to the connections under handshake (add) or removes it; it
// reports false, adding nothing, once the front is closed.
func (f *tlsFront) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !add {
		delete(f.handshaking, c)
		return true
	}
	if f.closed {
		return false
	}
	f.handshaking[c] = struct{}{}
	return true
}

// close stops the front accepting: it closes the listener and both queues
// (which Serve then no longer serves, if it has not begun), and aborts the
// handshakes under way. Calls after the first do nothing more.
func (f *tlsFront) close() {
	f.gate.Close()
	_ = f.h1q.Close()
	_ = f.h2q.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.handshaking {
		_ = c.Close()
	}
	clear(f.handshaking)
}

// Shutdown closes the front and shuts both servers down gracefully, within
// ctx, at once. It returns the first server's error: ctx's when
// connections were still open as it ended; then the HTTP/2 connections
// still open are closed (fasthttp's end as their clients go).
func (f *tlsFront) Shutdown(ctx context.Context) error {
	f.close()
	fastErr := make(chan error, 1)
	go func() { fastErr <- f.fast.ShutdownWithContext(ctx) }()
	err := f.h2.Shutdown(ctx)
	if err != nil {
		_ = f.h2.Close()
	}
	return errors.Join(err, <-fastErr)
}

// h2Server is the server of a tlsFront's HTTP/2 connections: Go's
// (*http.Server) or h2server's.
type h2Server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// connQueue is a net.Listener that accepts the connections handed to it
// by deliver, one at a time: how a tlsFront feeds each of its servers.
// After Close, Accept returns net.ErrClosed and deliver closes what it is
// handed. Safe for concurrent use.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn // unbuffered: a connection is either accepted or closed
	done  chan struct{}
	once  sync.Once
}

// newConnQueue returns an open queue whose Addr is addr (the listener's
// it is fed from).
func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// deliver waits until c is accepted, or closes c when q is closed first.
func (q *connQueue) deliver(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.done:
		_ = c.Close()
	}
}

// Accept returns the next connection delivered, or net.ErrClosed once q is
// closed.
func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept return net.ErrClosed; it closes no connection.
func (q *connQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

// Addr returns the address of the listener q is fed from.
func (q *connQueue) Addr() net.Addr { return q.addr }
