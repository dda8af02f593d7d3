package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/gateway/config"
)

// Sizes of the forwarding path.
const (
	// maxIdlePerEndpoint bounds the idle connections a pool keeps; a
	// connection returned to a full pool is closed.
	maxIdlePerEndpoint = 512
	// ConnBufferSize is the size of each upstream connection's read and
	// write buffers: an answer of up to about this size is read, and a
	// request body written, in one system call per this many bytes. A
	// connection holds them only while it carries a request (attach,
	// detach): an idle one holds none.
	ConnBufferSize = 64 << 10
)

// connReaders and connWriters hold the buffers of the upstream
// connections that are idle or closed, for the next connection that
// carries a request.
var (
	connReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, ConnBufferSize) }}
	connWriters = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, ConnBufferSize) }}
)

// connPool is the pool of persistent HTTP/1.1 connections to one endpoint,
// over plain TCP for an http endpoint and over TLS for an https one. It
// outlives generations (the Proxy keeps one per upstream, scheme and
// endpoint address), so a reload keeps the warm connections; each
// generation sets its timeouts.
//
// Idle connections are a stack: the most recently used is reused first, so
// the oldest sink to the bottom, where expiry finds them. Expiry needs no
// goroutine of its own: a timer armed while the pool holds idle
// connections closes those idle longer than the idle timeout, and a get
// skips (and closes) any it meets. A pool is safe for concurrent use and
// must not be copied.
type connPool struct {
	addr string // host:port
	// tlsConfig is the client configuration of an https endpoint's
	// connections (upstreamTLSConfig); nil dials plain TCP. Set before the
	// pool is used, never changed.
	tlsConfig *tls.Config

	connectTimeout atomic.Int64 // nanoseconds
	headerTimeout  atomic.Int64 // nanoseconds
	idleTimeout    atomic.Int64 // nanoseconds
	// allowLinkLocal is the upstream's allow_link_local.
	allowLinkLocal atomic.Bool

	// closed is set by close.
	closed atomic.Bool
	// Watch counts and logs what the endpoint sends outside an answer's
	// frame; nil in tests that build a pool alone.
	Watch *protocolWatch

	mu    sync.Mutex
	idle  []*Conn
	timer *time.Timer // armed while idle is not empty
}

// Conn is one connection to an endpoint with its buffers. It belongs to
// one request at a time.
type Conn struct {
	Net net.Conn
	// Reader and Writer are the connection's buffers while it carries a
	// request (from the pool's get to its Put or close); nil while it is
	// idle in its pool.
	Reader   *bufio.Reader
	Writer   *bufio.Writer
	idleFrom time.Time // when it was put back
	// body reads the request body being sent (see writeBody).
	body clientBody
	// written counts the bytes written to nc, so that an exchange knows
	// whether any of its request left (roundTrip): bw writes through
	// Write.
	written int64
	// Head is the head of the last answer read on the connection, answer
	// the reader of its body (answer.go): kept with the connection, so
	// that reading an answer allocates nothing.
	Head   AnswerHead
	answer answerBody
	// tap watches the answer of an alias request (models.go): made on the
	// first one the connection carries and kept with it, so that other
	// connections (and answers from the cache) do not carry its buffer.
	tap *answerTap
	// peeker looks at the socket of an idle connection (idle_unix.go):
	// the TCP socket, under the TLS session of an https endpoint's.
	peeker
	// isTLS: nc is a TLS connection, whose bytes on the socket while idle
	// are records of the session (takeIdle), not an answer.
	isTLS bool
	// cut is set once the connection was cut (cutNow): a read deadline
	// set later must not undo that.
	cut atomic.Bool
	// rdl is the read deadline on the socket as SetReadDeadline set it,
	// in Unix nanoseconds (0: none, or not known), which
	// SetAnswerDeadline leaves when it is close enough.
	rdl int64
	// cutter is CutNow as a method value, made once (Cutter).
	cutter func()
	// sock reads and writes a plain TCP connection's socket
	// (socket_linux.go); an https endpoint's go through its TLS session.
	sock Socket
	// awaitAnswer is set while FlushForAnswer flushes: the write is a
	// request's last, and waits for the answer (Socket.WriteAwait).
	awaitAnswer bool
	// age holds the Age value of an answer from the cache (fromMemory),
	// which Head's field aliases until the next answer on c.
	age [20]byte
}

// CutNow unblocks every read and write on c at once, for good: the
// exchange on it is given up (its client went away, or its time is
// over), and the connection is not reused. Safe to call from any
// goroutine, at any time, as a context.AfterFunc does.
func (c *Conn) CutNow() {
	c.cut.Store(true)
	_ = c.Net.SetDeadline(aLongTimeAgo)
}

// Cutter returns CutNow as a func, made once per connection, for a
// context.AfterFunc to call: a request that watches its client with it
// does not allocate the method value each time.
func (c *Conn) Cutter() func() {
	if c.cutter == nil {
		c.cutter = c.CutNow
	}
	return c.cutter
}

// SetReadDeadline sets c's read deadline to t, unless c was cut: a cut
// that came first (a client gone between two steps of the exchange)
// stays in force instead of being replaced by a deadline far off.
func (c *Conn) SetReadDeadline(t time.Time) {
	_ = c.Net.SetReadDeadline(t)
	c.rdl = 0
	if !t.IsZero() {
		c.rdl = t.UnixNano()
	}
	if c.cut.Load() {
		_ = c.Net.SetDeadline(aLongTimeAgo)
	}
}

// maxDeadlineSlack bounds how much later than asked SetAnswerDeadline's
// deadline may be.
const maxDeadlineSlack = 50 * time.Millisecond

// SetAnswerDeadline sets a read deadline of at least t, the end of a wait
// for an answer that begins at now, and at most a sixteenth of the wait
// (maxDeadlineSlack at most) later. The deadline c has is left when it is
// within those bounds: the next request on a connection, a few
// microseconds after the last, asks for nearly the same deadline, and a
// deadline moved is a runtime timer moved (about 1 µs of a request on the
// development machine). A new deadline is set at the far end of the
// bounds, so that requests keep finding it within them for the length of
// the slack.
func (c *Conn) SetAnswerDeadline(now, t time.Time) {
	if t.IsZero() {
		if c.rdl != 0 {
			c.SetReadDeadline(t)
		}
		return
	}
	want := t.UnixNano()
	slack := min(int64(t.Sub(now)/16), int64(maxDeadlineSlack))
	if c.rdl >= want && c.rdl <= want+slack {
		return
	}
	c.SetReadDeadline(time.Unix(0, want+max(slack, 0)))
}

// HeadRead ends the wait for c's last answer header, which ReadAnswer
// read under the read deadline Transmit set: the deadline is lifted when
// more of the answer is to come from the connection (a body that streams,
// or, with upgrade, the tunnel after a 101), so that a slow body streams
// for as long as it takes. When nothing more is to be read for this
// answer (no body, or all of it buffered) the deadline stays: the next
// request on the connection keeps or moves it (SetAnswerDeadline), and
// a runtime timer moved twice a request costs about a microsecond.
func (c *Conn) HeadRead(upgrade bool) {
	if upgrade || c.AnswerStream() != nil && !c.BodyBuffered() {
		c.SetReadDeadline(time.Time{})
	}
}

// Write writes b to the connection, counting what went out.
func (c *Conn) Write(b []byte) (n int, err error) {
	if c.awaitAnswer {
		n, err = c.sock.WriteAwait(c.Net, b)
	} else {
		n, err = c.sock.Write(c.Net, b)
	}
	c.written += int64(n)
	return n, err
}

// FlushForAnswer flushes the rest of a request from c.Writer, under the
// read deadline of its answer, which the caller has set; on a plain TCP
// connection the flush returns once the answer can be read (or the
// deadline passed), which saves the read that would find the socket
// empty (Socket.WriteAwait).
func (c *Conn) FlushForAnswer() error {
	c.awaitAnswer = true
	err := c.Writer.Flush()
	c.awaitAnswer = false
	return err
}

// Read reads from the connection: the Reader's source.
func (c *Conn) Read(p []byte) (int, error) { return c.sock.Read(c.Net, p) }

func newConnPool(addr string) *connPool {
	return &connPool{addr: addr}
}

// setTimeouts sets the pool's timeouts (from the generation being applied).
func (p *connPool) setTimeouts(connect, header, idle time.Duration) {
	p.connectTimeout.Store(int64(connect))
	p.headerTimeout.Store(int64(header))
	p.idleTimeout.Store(int64(idle))
}

func (p *connPool) ResponseHeaderTimeout() time.Duration {
	return time.Duration(p.headerTimeout.Load())
}

// get returns an idle connection (reused true) or dials a new one within
// the connect timeout. ctx ends the dial early (the client went away).
func (p *connPool) get(ctx context.Context) (c *Conn, reused bool, err error) {
	if c := p.takeIdle(); c != nil {
		return c, true, nil
	}
	c, err = p.dial(ctx)
	return c, false, err
}

// takeIdle pops the most recently used idle connection that has not
// expired and is provably clean: the endpoint has neither closed it nor
// sent anything on it since its last answer (idleState). The others met
// on the way are closed, stray bytes counted as unsolicited.
func (p *connPool) takeIdle() *Conn {
	maxIdle := time.Duration(p.idleTimeout.Load())
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if maxIdle > 0 && time.Since(c.idleFrom) >= maxIdle {
			c.Net.Close()
			continue
		}
		switch c.idleState() {
		case idleClean:
			c.attach()
			return c
		case idleData:
			// On a TLS connection they are records, which cannot be read
			// without reading the session: a close_notify, a TLS 1.3
			// session ticket or key update. Not an unsolicited answer,
			// but the connection is not provably clean either.
			if !c.isTLS {
				p.Watch.report(reasonUnsolicited)
			}
		}
		c.Net.Close()
	}
}

// dial opens a new connection within the connect timeout and, to an https
// endpoint, does the TLS handshake within the connect timeout again. A
// failed handshake is a failed connect: the request cannot have reached
// the endpoint.
func (p *connPool) dial(ctx context.Context) (*Conn, error) {
	timeout := time.Duration(p.connectTimeout.Load())
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second,
		Control: config.DialControl(p.allowLinkLocal.Load())}
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	if p.tlsConfig != nil {
		if nc, err = handshake(ctx, nc, p.tlsConfig, timeout); err != nil {
			return nil, err
		}
	}
	return newUpConn(nc), nil
}

// handshake runs the client side of a TLS handshake on nc within timeout
// (none when 0), given up when ctx ends, and returns the TLS connection;
// on failure nc is closed.
func handshake(ctx context.Context, nc net.Conn, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	if timeout > 0 {
		_ = nc.SetDeadline(time.Now().Add(timeout))
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, fmt.Errorf("tls handshake: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return tc, nil
}

// upstreamTLSConfig returns the client configuration of the TLS
// connections to the https endpoint host (host:port): base's (nil: the
// system roots), with the endpoint's host as the server name (sent as SNI
// unless it is an IP address, which the certificate is checked against
// instead), only http/1.1 offered by ALPN (the pool speaks nothing else),
// TLS 1.2 at least, and a session cache of its own unless base has one, so
// that new connections resume their sessions.
func upstreamTLSConfig(base *tls.Config, host string) *tls.Config {
	cfg := &tls.Config{}
	if base != nil {
		cfg = base.Clone()
	}
	cfg.ServerName = stripPort(host)
	cfg.NextProtos = []string{"http/1.1"}
	if cfg.MinVersion < tls.VersionTLS12 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.ClientSessionCache == nil {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
	}
	return cfg
}

// newUpConn makes nc, a connection to an endpoint, one the pools can
// carry requests on: its answers read through br, its writes counted, its
// socket looked at when it is taken idle (for a TLS connection, the TCP
// socket under it: the answers are read through the TLS connection, the
// socket is only peeked at).
func newUpConn(nc net.Conn) *Conn {
	c := &Conn{Net: nc}
	c.attach()
	raw := nc
	if tc, ok := nc.(*tls.Conn); ok {
		raw, c.isTLS = tc.NetConn(), true
	} else {
		c.sock.Init(nc)
	}
	c.peeker.init(raw)
	return c
}

// Put returns a connection whose last exchange completed: its answer was
// read to the end of its frame. It is closed instead when anything is
// buffered beyond that end (counted as extra_bytes: a later request must
// never take it for its answer), or when the pool is full or closed.
//
// The connection's buffers go back for other connections either way
// (detach): nothing of c may be used by the caller after Put.
func (p *connPool) Put(c *Conn) {
	extra := c.Reader.Buffered() > 0
	c.detach()
	if extra {
		p.Watch.report(reasonExtraBytes)
		c.Net.Close()
		return
	}
	c.idleFrom = time.Now()
	p.mu.Lock()
	if p.closed.Load() || len(p.idle) >= maxIdlePerEndpoint {
		p.mu.Unlock()
		c.Net.Close()
		return
	}
	p.idle = append(p.idle, c)
	if len(p.idle) == 1 {
		p.armLocked()
	}
	p.mu.Unlock()
}

// attach gives c, about to carry a request, its read and write buffers.
func (c *Conn) attach() {
	c.Reader = connReaders.Get().(*bufio.Reader)
	c.Reader.Reset(c)
	c.Writer = connWriters.Get().(*bufio.Writer)
	c.Writer.Reset(c)
}

// detach gives c's buffers back, c's exchange being over: its answer read
// to its end (the reader holds nothing) and its request flushed. Nothing
// that read them (the answer's body reader) may be used after.
func (c *Conn) detach() {
	c.answer = answerBody{}
	c.Reader.Reset(nil)
	connReaders.Put(c.Reader)
	c.Writer.Reset(nil)
	connWriters.Put(c.Writer)
	c.Reader, c.Writer = nil, nil
}

// armLocked (re)starts the expiry timer; p.mu is held.
func (p *connPool) armLocked() {
	d := time.Duration(p.idleTimeout.Load())
	if d <= 0 {
		return
	}
	if p.timer == nil {
		p.timer = time.AfterFunc(d, p.expire)
		return
	}
	p.timer.Reset(d)
}

// expire closes the idle connections that have been idle for the idle
// timeout; it runs on the timer and re-arms while any remain.
func (p *connPool) expire() {
	maxIdle := time.Duration(p.idleTimeout.Load())
	var stale []*Conn
	p.mu.Lock()
	// The oldest are at the bottom of the stack.
	n := 0
	for n < len(p.idle) && time.Since(p.idle[n].idleFrom) >= maxIdle {
		n++
	}
	if n > 0 {
		stale = append(stale, p.idle[:n]...)
		rest := copy(p.idle, p.idle[n:])
		clear(p.idle[rest:])
		p.idle = p.idle[:rest]
	}
	if len(p.idle) > 0 && !p.closed.Load() {
		p.armLocked()
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.Net.Close()
	}
}

// close closes every idle connection and makes put close the rest as they
// come back. The pool stays usable for dialing (a request of an old
// generation still in flight may need one), but keeps nothing.
func (p *connPool) close() {
	p.mu.Lock()
	p.closed.Store(true)
	idle := p.idle
	p.idle = nil
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.Net.Close()
	}
}

// idleCount is the number of idle connections (for tests and metrics).
func (p *connPool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
