//go:build linux

package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/dwara/dwara/gateway/config"
)

// The loop front: an event loop per P (epoll, level-triggered, on a
// locked OS thread) that serves the common exchange itself and hands
// everything else to the fasthttp front, so that routing, the pick, the
// bookkeeping and every rarer HTTP/1.1 feature stay the fasthttp front's.
//
// A loop owns its client connections and its own idle connections to the
// endpoints, as non-blocking sockets that Go's network poller never sees:
// it reads a request head when epoll says the socket is readable (no read
// that finds nothing, no goroutine parked and woken per read), routes it
// (fastRoute, the fasthttp front's), writes the request to a connection of
// the endpoint and, when the endpoint's answer is in whole, writes the
// client its answer (copyAnswer, every front's header rules).
// Timeouts are deadlines the loop checks every loopTick instead of timers
// set and reset per read and write.
//
// What the loop serves itself, an "inline" exchange: an HTTP/1.1 request
// with no body (no Content-Length above 0, no Transfer-Encoding), no
// Expect and no Upgrade, when no access log is kept and the matched
// service's targets have http endpoints at IP addresses and no mirror;
// and an answer whose head and whole body (Content-Length, at most
// connBufferSize with the head) fit the loop's buffer, or that has no body
// (HEAD, 204, 304), and that is not an interim (1xx) answer.
//
// Everything else is handed over, in one of two places:
//   - before routing (a request the loop does not serve, a head that does
//     not parse or is larger than the buffer): the client connection,
//     with the bytes read from it so far, goes to the fasthttp server
//     (fasthttp.Server.ServeConn on a goroutine), which serves it from
//     then on;
//   - once the exchange began (an answer the loop does not relay itself,
//     or a failure of the first attempt: a refused connect, a pooled
//     connection the endpoint had closed, the response-header timeout): the
//     exchange goes on as the fasthttp front's, on a goroutine, with the
//     client's and the endpoint's connections as Go connections: the
//     answer head read again from what the loop had read (readAnswer),
//     retries and passive checks by retryFrom, the answer written as
//     fasthttp writes it (a body streamed, flushed as it comes), and the
//     client connection then served by the fasthttp server.
//
// The bookkeeping of an inline exchange is the fasthttp front's: the
// request's fastExchange begins its attempt when routed and is finished
// when the answer is in (or the client went away, counted 499). A panic
// while a loop serves a connection is logged, its exchange counted 502,
// and the connection closed; the loop goes on.
//
// The front serves plain TCP only: with TLS, node uses the fasthttp
// front, which does the handshakes and HTTP/2.

// LoopSupported reports whether the loop front runs on this system.
const LoopSupported = true

// loopTick is how often a loop checks its deadlines (and wakes when idle).
const loopTick = 100 * time.Millisecond

// maxFreeBuffers bounds the buffers a loop keeps for reuse.
const maxFreeBuffers = 256

// LoopServer is the loop front of a Proxy. Serve runs it on a listener;
// Shutdown stops it gracefully.
type LoopServer struct {
	p    *Proxy
	fast *fasthttp.Server // serves what is handed over
	// idle bounds a keep-alive connection's wait for its next request,
	// head a request head from its first byte (on a new connection, from
	// the accept); 0: none. They are fast's IdleTimeout and ReadTimeout.
	idle, head time.Duration
	maxConns   int64 // <= 0: no cap
	open       atomic.Int64
	closing    atomic.Bool
	force      atomic.Bool
	mu         sync.Mutex
	started    bool
	done       chan struct{} // closed when Serve's loops have returned
}

// NewLoopServer returns the loop front of p, handing what it does not
// serve to fast (a NewFastServer of p, whose IdleTimeout and ReadTimeout
// the loop keeps too), with at most maxConns client connections open at
// once (<= 0: no cap); more wait in the kernel's accept queue.
func NewLoopServer(p *Proxy, fast *fasthttp.Server, maxConns int) *LoopServer {
	return &LoopServer{p: p, fast: fast, idle: fast.IdleTimeout, head: fast.ReadTimeout,
		maxConns: int64(maxConns), done: make(chan struct{})}
}

// Serve serves connections accepted on ln, a TCP listener it takes over
// (and closes), until Shutdown. It returns nil after Shutdown.
func (s *LoopServer) Serve(ln net.Listener) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return errors.New("the loop front needs a TCP listener")
	}
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("the loop front serves once")
	}
	s.started = true
	if s.closing.Load() {
		// Shut down before it began: nothing to serve (as net/http's
		// Serve after Shutdown, but nil, as promised).
		s.mu.Unlock()
		close(s.done)
		_ = ln.Close()
		return nil
	}
	s.mu.Unlock()
	defer close(s.done)
	f, err := tl.File()
	if err != nil {
		if s.closing.Load() {
			return nil // the listener was closed by a shutdown meanwhile
		}
		return err
	}
	lnfd, err := unix.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		return err
	}
	// The duplicate keeps the socket listening; Go's poller no longer
	// watches it.
	_ = ln.Close()
	unix.CloseOnExec(lnfd)
	if err := unix.SetNonblock(lnfd, true); err != nil {
		unix.Close(lnfd)
		return err
	}
	n := runtime.GOMAXPROCS(0)
	loops := make([]*eloop, 0, n)
	for range n {
		l, err := newLoop(s, lnfd)
		if err != nil {
			for _, l := range loops {
				unix.Close(l.epfd)
			}
			unix.Close(lnfd)
			return err
		}
		loops = append(loops, l)
	}
	// The listener is closed as soon as every loop stopped accepting (at
	// Shutdown), not when the last connection is done: a client that
	// connects while the loops drain is refused, and goes elsewhere,
	// instead of waiting in the kernel's queue to be reset.
	var accepting sync.WaitGroup
	accepting.Add(len(loops))
	lnClosed := make(chan struct{})
	go func() {
		accepting.Wait()
		unix.Close(lnfd)
		close(lnClosed)
	}()
	var wg sync.WaitGroup
	for _, l := range loops {
		l.accepting = &accepting
		wg.Go(l.run)
	}
	wg.Wait()
	<-lnClosed
	return nil
}

// Shutdown stops accepting, closes idle connections, lets the exchanges
// in flight finish and then closes their connections, within ctx; past
// it, the rest are closed (exchanges counted as the client gone). The
// connections handed over are shut down with the fasthttp server.
func (s *LoopServer) Shutdown(ctx context.Context) error {
	// closing is set under mu, so Serve either sees it before it starts
	// (and returns nil at once) or has started, and is waited for.
	s.mu.Lock()
	s.closing.Store(true)
	started := s.started
	s.mu.Unlock()
	var err error
	if started {
		select {
		case <-s.done:
		case <-ctx.Done():
			s.force.Store(true)
			<-s.done
			err = ctx.Err()
		}
	}
	if ferr := s.fast.ShutdownWithContext(ctx); err == nil {
		err = ferr
	}
	return err
}

// Conns is the number of client connections open, those handed over
// included.
func (s *LoopServer) Conns() int64 { return s.open.Load() }

// States of a client connection.
const (
	cIdle  = iota // waiting for a request's first byte
	cHead         // reading a request head
	cWait         // an exchange in flight: waiting for the endpoint
	cWrite        // writing an answer the socket did not take at once
)

// lconn is a client connection of a loop.
type lconn struct {
	fd      int
	state   uint8
	events  uint32
	addr    loopAddr // for the request's ctx
	in      []byte   // read, not yet served
	scanned int      // how much of in headEnd looked at
	out     []byte   // the answer being written
	outOff  int
	// deadline ends the current state (zero: none); closeAfter closes the
	// connection once the answer is written.
	deadline   time.Time
	closeAfter bool
	// served: an answer was written on it (a new connection that has not
	// sent its first request yet is not idle for Shutdown).
	served bool
	// The exchange in flight (cWait): its request, bookkeeping, request id
	// and endpoint connection. goneAt is set when the client half-closed
	// or failed meanwhile: the exchange is given up then, unless the
	// answer came first (as fastTransmit looks at the client).
	ctx    *fasthttp.RequestCtx
	x      *fastExchange
	rid    string
	u      *uconn
	goneAt time.Time
}

// States of an endpoint connection.
const (
	uIdle       = iota // in its loop pool
	uConnecting        // non-blocking connect under way
	uSending           // the request is not all written
	uWaiting           // waiting for the answer head
	uBody              // the head is in; the rest of a small body is not
)

// uconn is a connection of a loop to an endpoint.
type uconn struct {
	fd       int
	state    uint8
	events   uint32
	lp       *loopPool
	reused   bool
	in       []byte
	out      []byte
	outOff   int
	scanned  int       // how much of in headEnd looked at
	deadline time.Time // connect or answer head; zero: none
	idleFrom time.Time
	c        *lconn // the client whose exchange it carries
}

// loopPool is a loop's idle connections to one endpoint (its connPool,
// whose timeouts apply).
type loopPool struct {
	pool *connPool
	ap   netip.AddrPort // invalid when the address is a name: not served inline
	sa   unix.Sockaddr
	idle []*uconn
}

// loopAddr is the net.Conn a request's ctx has while a loop serves it: it
// gives fastRoute the peer's address; its I/O methods are never called.
type loopAddr struct {
	local, remote *net.TCPAddr
}

func (a *loopAddr) Read([]byte) (int, error)         { return 0, errors.ErrUnsupported }
func (a *loopAddr) Write([]byte) (int, error)        { return 0, errors.ErrUnsupported }
func (a *loopAddr) Close() error                     { return nil }
func (a *loopAddr) LocalAddr() net.Addr              { return a.local }
func (a *loopAddr) RemoteAddr() net.Addr             { return a.remote }
func (a *loopAddr) SetDeadline(time.Time) error      { return nil }
func (a *loopAddr) SetReadDeadline(time.Time) error  { return nil }
func (a *loopAddr) SetWriteDeadline(time.Time) error { return nil }

// fdSlot is what a loop knows of a file descriptor it watches.
type fdSlot struct {
	c *lconn
	u *uconn
}

// eloop is one event loop.
type eloop struct {
	s      *LoopServer
	epfd   int
	lnfd   int
	paused bool // the listener is out of the set: at the connection cap
	// accepting is done once for each loop that stopped accepting for good
	// (stopAccepting).
	accepting     *sync.WaitGroup
	stoppedAccept bool
	fds           []fdSlot
	conns         map[*lconn]struct{}
	ups           map[*uconn]struct{}
	pools         map[*connPool]*loopPool
	svcTable      *table
	now           time.Time
	nextTick      time.Time
	events        []unix.EpollEvent
	// Parsing and writing: heads are parsed from a bytes.Reader through
	// br, answer heads in place into ah (answer.go), and requests and
	// answers serialised through bw into aw's slice.
	hr bytes.Reader
	br *bufio.Reader
	aw appendWriter
	bw *bufio.Writer
	ah answerHead
	// free holds buffers of connBufferSize for the connections that are
	// reading or writing; an idle connection holds none.
	free [][]byte
	// serving: serveRequests is running (a request answered at once
	// leaves the next one to its loop).
	serving bool
}

// appendWriter appends what is written to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func newLoop(s *LoopServer, lnfd int) (*eloop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	l := &eloop{
		s: s, epfd: epfd, lnfd: lnfd,
		conns: map[*lconn]struct{}{}, ups: map[*uconn]struct{}{},
		pools:  map[*connPool]*loopPool{},
		events: make([]unix.EpollEvent, 256),
		br:     bufio.NewReaderSize(nil, connBufferSize),
	}
	l.bw = bufio.NewWriterSize(&l.aw, connBufferSize)
	// Every loop waits on the listener; EPOLLEXCLUSIVE wakes one per
	// connection.
	if err := l.watchListener(); err != nil {
		unix.Close(epfd)
		return nil, err
	}
	return l, nil
}

// run serves the loop's connections until the server is shut down and
// they are gone.
func (l *eloop) run() {
	defer unix.Close(l.epfd)
	defer l.stopAccepting()
	l.now = time.Now()
	l.nextTick = l.now.Add(loopTick)
	stopped := false
	wait := 0 // after events, look again at once; block only when none came
	for {
		n, err := l.epollWait(wait)
		if n <= 0 && wait == 0 {
			// Nothing pending: let other goroutines run before blocking.
			runtime.Gosched()
			wait = int(loopTick / time.Millisecond)
			continue
		}
		wait = 0
		if err != nil && err != unix.EINTR {
			l.s.p.log.Error("loop front: epoll_wait failed; closing the loop's connections", "err", err)
			l.closeAll()
			return
		}
		l.now = time.Now()
		for i := range max(n, 0) {
			ev := &l.events[i]
			l.event(int(ev.Fd), ev.Events)
		}
		if !l.now.Before(l.nextTick) {
			l.nextTick = l.now.Add(loopTick)
			l.guard(nil, l.tick)
		}
		if l.s.closing.Load() && !stopped {
			stopped = true
			l.stopAccepting()
			l.guard(nil, l.tick)
		}
		if stopped && (len(l.conns) == 0 || l.s.force.Load()) {
			l.closeAll()
			return
		}
	}
}

// stopAccepting takes, once, the connections waiting on the listener
// (they are served, and closed after their answer), and takes the listener
// out of the loop's set for good.
func (l *eloop) stopAccepting() {
	if l.stoppedAccept {
		return
	}
	l.stoppedAccept = true
	for {
		fd, sa, err := unix.Accept4(l.lnfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			break
		}
		l.adopt(fd, sa)
	}
	l.pauseAccepting()
	// The listener's descriptor is closed once every loop is done with it
	// (Serve), and its number may then be given to a socket of any loop:
	// no event may be taken for the listener's from here on.
	l.lnfd = -1
	l.accepting.Done()
}

// epollWait waits for events at most msec milliseconds; a wait of 0, which
// does not block, is a raw system call (no hand-off of the P).
func (l *eloop) epollWait(msec int) (int, error) {
	if msec != 0 {
		return unix.EpollWait(l.epfd, l.events, msec)
	}
	r, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(l.epfd), uintptr(unsafe.Pointer(&l.events[0])), uintptr(len(l.events)), 0, 0, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// rawRead and rawWrite are read and write on a non-blocking socket, which
// never wait: raw system calls, so the loop keeps its P.
func rawRead(fd int, b []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, b) }
func rawWrite(fd int, b []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, b) }

func rawIO(trap uintptr, fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// readInto reads what fd has into the free space of *buf, taking a buffer
// for it first when it holds none.
func (l *eloop) readInto(fd int, buf *[]byte) (int, error) {
	if *buf == nil {
		*buf = l.getBuf()
	}
	b := *buf
	n, err := rawRead(fd, b[len(b):cap(b)])
	if n > 0 {
		*buf = b[:len(b)+n]
	}
	return n, err
}

// after is the deadline d from now, zero (none) when d is not positive.
func (l *eloop) after(d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return l.now.Add(d)
}

// render serialises, with write, through the loop's writer into buf
// (a buffer is taken when it is nil) and returns the result.
func (l *eloop) render(buf []byte, write func(*bufio.Writer)) []byte {
	if buf == nil {
		buf = l.getBuf()
	}
	l.aw.b = buf[:0]
	l.bw.Reset(&l.aw)
	write(l.bw)
	_ = l.bw.Flush()
	buf = l.aw.b
	l.aw.b = nil
	return buf
}

// watchListener puts the listener in the loop's set; pauseAccepting takes
// it out (at the connection cap, or when accepting fails) until tick puts
// it back.
func (l *eloop) watchListener() error {
	err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.lnfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(l.lnfd)})
	if err == nil {
		l.paused = false
	}
	return err
}

func (l *eloop) pauseAccepting() {
	if !l.paused {
		_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, l.lnfd, nil)
		l.paused = true
	}
}

// event handles what epoll reported for fd.
//
// A descriptor closed while a batch of events is served (closeUp,
// closeClient) may be given to a new socket (a dial, an accept) before
// the batch is over, and a later event of the batch for the old socket
// then reaches the new one's slot. Every handler therefore takes an event
// as a hint, never as a fact: reads and writes are non-blocking and an
// EAGAIN waits for the next event; a connect is taken as done only when
// SO_ERROR and EPOLLOUT say so and a write then succeeds; an idle
// endpoint connection is closed only when a look at its socket
// (peekFD) finds bytes or an end. The listener's number is never
// compared after the loop stopped accepting (stopAccepting).
func (l *eloop) event(fd int, ev uint32) {
	if fd == l.lnfd {
		l.guard(nil, l.accept)
		return
	}
	if fd >= len(l.fds) {
		return
	}
	switch slot := l.fds[fd]; {
	case slot.c != nil:
		l.guard(slot.c, func() { l.clientEvent(slot.c, ev) })
	case slot.u != nil:
		l.guard(slot.u.c, func() { l.upEvent(slot.u, ev) })
	}
}

// guard runs f, recovering a panic: it is logged, the exchange of c (if
// any) counted 502 and c closed.
func (l *eloop) guard(c *lconn, f func()) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		l.s.p.logPanic("panic serving a request", v)
		if c != nil && l.owns(c) {
			l.abort(c, http.StatusBadGateway)
		}
	}()
	f()
}

func (l *eloop) owns(c *lconn) bool {
	_, ok := l.conns[c]
	return ok
}

// watch adds fd to the set with events, for c or u.
func (l *eloop) watch(fd int, events uint32, slot fdSlot) error {
	for fd >= len(l.fds) {
		l.fds = append(l.fds, make([]fdSlot, max(len(l.fds), 64))...)
	}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		return err
	}
	l.fds[fd] = slot
	return nil
}

// modify sets the events watched on fd, when they change.
func (l *eloop) modify(fd int, have *uint32, events uint32) {
	if *have == events {
		return
	}
	*have = events
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

// forget removes fd from the set and from the loop.
func (l *eloop) forget(fd int) {
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	if fd < len(l.fds) {
		l.fds[fd] = fdSlot{}
	}
}

// accept takes the connections waiting on the listener, up to the cap.
func (l *eloop) accept() {
	for {
		if m := l.s.maxConns; m > 0 && l.s.open.Load() >= m {
			// The rest wait in the kernel's queue; tick puts the listener
			// back once a connection closed.
			l.pauseAccepting()
			return
		}
		fd, sa, err := unix.Accept4(l.lnfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch err {
		case nil:
		case unix.EAGAIN, unix.EINTR, unix.ECONNABORTED:
			return
		default:
			// Out of descriptors or memory: the listener stays readable, so
			// it leaves the set until the next tick instead of spinning.
			l.s.p.log.Warn("loop front: accept failed; accepting again in a moment", "err", err)
			l.pauseAccepting()
			return
		}
		l.adopt(fd, sa)
	}
}

// adopt makes fd, a connection accepted from sa, one of the loop's.
func (l *eloop) adopt(fd int, sa unix.Sockaddr) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	c := &lconn{fd: fd}
	c.addr.remote = tcpAddrOf(sa)
	if lsa, err := unix.Getsockname(fd); err == nil {
		c.addr.local = tcpAddrOf(lsa)
	}
	c.events = unix.EPOLLIN | unix.EPOLLRDHUP
	if err := l.watch(fd, c.events, fdSlot{c: c}); err != nil {
		unix.Close(fd)
		return
	}
	l.s.open.Add(1)
	l.conns[c] = struct{}{}
	c.deadline = l.after(l.s.head)
}

func tcpAddrOf(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	}
	return &net.TCPAddr{}
}

// clientEvent handles an event on a client connection.
func (l *eloop) clientEvent(c *lconn, ev uint32) {
	switch c.state {
	case cWait:
		// The endpoint has not answered: what the client sends meanwhile
		// (a pipelined request) is kept for after; an end of file or an
		// error is the client going away, looked at again once
		// fastClientCheckInterval has passed (tick), unless the answer
		// comes first. Once the buffer is full, or the client is gone, the
		// socket is not watched until the answer is written.
		n, err := l.readInto(c.fd, &c.in)
		switch {
		case n > 0:
		case err == unix.EAGAIN || err == unix.EINTR:
			return
		case len(c.in) == cap(c.in):
		case c.goneAt.IsZero():
			c.goneAt = l.now.Add(fastClientCheckInterval)
		}
		if len(c.in) == cap(c.in) || !c.goneAt.IsZero() {
			l.modify(c.fd, &c.events, 0)
		}
		return
	case cWrite:
		l.flushClient(c)
		return
	}
	n, err := l.readInto(c.fd, &c.in)
	if err == unix.EAGAIN || err == unix.EINTR {
		if len(c.in) == 0 {
			c.in = l.putBuf(c.in)
		}
		return
	}
	if n <= 0 {
		l.closeClient(c)
		return
	}
	if c.state == cIdle {
		// A keep-alive connection's next head has the head timeout from
		// its first byte; a new connection's first head has it from the
		// accept (adopt), so that a client sending its head a byte at a
		// time cannot make it twice as long.
		c.state = cHead
		if c.served {
			c.deadline = l.after(l.s.head)
		}
	}
	l.serveRequests(c)
}

// serveRequests serves the requests whose heads c has read, until one
// has to wait (for more of its head, its endpoint, or the client taking
// its answer) or c is handed over or closed.
func (l *eloop) serveRequests(c *lconn) {
	l.serving = true
	defer func() { l.serving = false }()
	for (c.state == cHead || c.state == cIdle) && len(c.in) > 0 && l.owns(c) {
		end, bare := headEnd(c.in, c.scanned)
		if why := badRequestLine(c.in); why != "" {
			// Answered as soon as the line is in: an HTTP/0.9 request
			// line, for one, has no head to wait for.
			l.refuseHead(c, why)
			return
		}
		if bare || end < 0 && len(c.in) == cap(c.in) {
			// A bare LF (refused by the fasthttp front, or a head it
			// answers itself), or a head larger than the buffer (431).
			l.handOver(c)
			return
		}
		if end < 0 {
			c.scanned = len(c.in)
			return
		}
		c.scanned = 0
		if c.state == cIdle {
			c.state = cHead
		}
		l.startRequest(c, end)
	}
}

// badRequestLine returns what is wrong with the request line at the start
// of b (checkRequestLine), or "" when it is fine, not all in yet, empty
// (an empty line before a request line is the fasthttp front's to skip)
// or ended by a bare LF (the fasthttp front's to judge, with the head).
func badRequestLine(b []byte) string {
	i := bytes.IndexByte(b, '\n')
	if i <= 1 || b[i-1] != '\r' {
		return ""
	}
	return checkRequestLine(b[:i-1])
}

// refuseHead answers c's request head 400 with detail, as fastRoute
// refuses a head, and closes c once the answer is written.
func (l *eloop) refuseHead(c *lconn, detail string) {
	ctx := loopCtxs.Get().(*fasthttp.RequestCtx)
	ctx.Response.Reset()
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.SetConnectionClose()
	fastProblem(ctx, http.StatusBadRequest, "Bad request head", detail)
	l.s.finishHead(ctx)
	c.out = l.render(c.out, func(bw *bufio.Writer) { _ = ctx.Response.Write(bw) })
	ctx.Response.Reset()
	loopCtxs.Put(ctx)
	c.in, c.scanned = c.in[:0], 0
	c.outOff, c.closeAfter, c.state = 0, true, cWrite
	l.flushClient(c)
}

var loopCtxs = sync.Pool{New: func() any { return new(fasthttp.RequestCtx) }}

// startRequest serves the request whose head is c.in[:end]: it parses it,
// hands c over when the loop does not serve it, answers it when it is not
// to be forwarded, else starts its exchange.
func (l *eloop) startRequest(c *lconn, end int) {
	p := l.s.p
	ctx := loopCtxs.Get().(*fasthttp.RequestCtx)
	ctx.Init2(&c.addr, p.errorLog, false)
	ctx.Request.Reset()
	ctx.Response.Reset()
	h := &ctx.Request.Header
	l.hr.Reset(c.in[:end])
	l.br.Reset(&l.hr)
	t := p.table.Load()
	var svc *service
	ok := false
	if h.Read(l.br) == nil {
		svc, ok = l.inline(t, ctx)
	}
	if !ok { // a head fasthttp does not take, or a request the loop does not serve
		loopCtxs.Put(ctx)
		l.handOver(c)
		return
	}
	c.in = c.in[:copy(c.in, c.in[end:])]
	start := time.Now()
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.SkipBody = h.IsHead()
	if h.ConnectionClose() {
		ctx.Response.SetConnectionClose()
	}
	x := fastExchanges.Get().(*fastExchange)
	rid := fastRequestID(h, &x.ridBuf)
	c.ctx, c.x, c.rid = ctx, x, rid
	if t == nil {
		ctx.Response.Header.Set("X-Request-Id", rid)
		fastProblem(ctx, http.StatusServiceUnavailable, "No generation loaded", "the gateway has not applied a configuration generation yet")
		l.answer(c)
		return
	}
	rt, ok := p.fastRoute(ctx, x, t, svc, rid, start)
	if !ok {
		l.answer(c)
		return
	}
	x.p, x.tg, x.a, x.start, x.ctx = p, rt.tg, newAttempt(rt.ep), start, ctx
	if rt.setCookie != "" {
		ctx.Response.Header.Add(fasthttp.HeaderSetCookie, rt.setCookie)
	}
	l.send(c, rt.ep)
}

// inline reports whether the loop serves the request of ctx itself (see
// the package comment above), with the service t matches for it, if any,
// which routing need not match again.
func (l *eloop) inline(t *table, ctx *fasthttp.RequestCtx) (*service, bool) {
	h := &ctx.Request.Header
	if cl := h.ContentLength(); cl > 0 || cl == -1 {
		return nil, false // a body (fasthttp's -2: no Content-Length, no body)
	}
	if string(h.Protocol()) != "HTTP/1.1" || len(h.Peek(fasthttp.HeaderTransferEncoding)) > 0 ||
		len(h.Peek(fasthttp.HeaderExpect)) > 0 || fastIsUpgrade(h) || l.s.p.access != nil {
		return nil, false
	}
	if t == nil {
		return nil, true
	}
	path, ok := fastRoutePath(fastTarget(h))
	if !ok {
		return nil, true // refused by fastRoute
	}
	svc := t.match(b2s(ctx.Host()), path)
	return svc, svc == nil || l.serves(t, svc)
}

// serves reports whether the loop serves the requests of svc, a service
// of t, itself: the generation decided it (service.fastPath).
func (l *eloop) serves(t *table, svc *service) bool {
	l.sawTable(t)
	return svc.fastPath
}

// sawTable lets go of the loop's pools that the generation of t closed
// (the endpoints it no longer has), once per table: when a request meets
// the new table, or at the next tick after it was applied, whichever
// comes first.
func (l *eloop) sawTable(t *table) {
	if l.svcTable == t {
		return
	}
	l.svcTable = t
	for cp, lp := range l.pools {
		if cp.closed.Load() {
			l.dropPool(lp)
		}
	}
}

// pool returns the loop's pool for cp.
func (l *eloop) pool(cp *connPool) *loopPool {
	if lp := l.pools[cp]; lp != nil {
		return lp
	}
	lp := &loopPool{pool: cp}
	if ap, err := netip.ParseAddrPort(cp.addr); err == nil {
		lp.ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if lp.ap.Addr().Is4() {
			lp.sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: lp.ap.Addr().As4()}
		} else {
			lp.sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: lp.ap.Addr().As16()}
		}
	}
	l.pools[cp] = lp
	return lp
}

// dropPool closes lp's idle connections and forgets it.
func (l *eloop) dropPool(lp *loopPool) {
	for _, u := range lp.idle {
		l.closeUp(u)
	}
	lp.idle = nil
	delete(l.pools, lp.pool)
}

// send starts c's exchange with ep: on an idle connection of the loop's
// pool, else on a new one.
func (l *eloop) send(c *lconn, ep *endpoint) {
	lp := l.pool(ep.pool)
	u := l.takeIdle(lp, !safeMethod(b2s(c.ctx.Method())))
	if u == nil {
		var err error
		if u, err = l.dial(lp); err != nil {
			l.continueWith(c, exchange{}, dialError(err))
			return
		}
	}
	u.c, c.u = c, u
	u.out = l.render(u.out, func(bw *bufio.Writer) { writeFastHead(bw, c.ctx, ep, c.x.tg, c.rid, c.x.ip, 0, nil) })
	u.outOff = 0
	c.state, c.deadline = cWait, time.Time{}
	if u.state == uConnecting {
		return // the request goes once connected
	}
	u.state, u.deadline = uSending, l.after(lp.pool.responseHeaderTimeout())
	l.flushUp(u)
}

// takeIdle pops the most recently used idle connection of lp that has not
// expired and is clean (upcheck.go). The loop watches its idle
// connections, so one the endpoint closed or wrote on is gone by the time
// it is taken, but for an event later in the batch being served: for a
// request that is not to be sent twice (unsafe: not a GET, HEAD, OPTIONS
// or TRACE) the socket is looked at too, as connPool.takeIdle does, since
// a request written to a connection found closed after is answered 502;
// a safe one is sent again on a new connection then (continueWith), so it
// saves the look.
func (l *eloop) takeIdle(lp *loopPool, unsafe bool) *uconn {
	for n := len(lp.idle); n > 0; n = len(lp.idle) {
		u := lp.idle[n-1]
		lp.idle[n-1] = nil
		lp.idle = lp.idle[:n-1]
		if l.expired(u) {
			l.closeUp(u)
			continue
		}
		state := idleClean
		if unsafe {
			state = peekFD(u.fd)
		}
		switch state {
		case idleClean:
			u.reused = true
			return u
		case idleData:
			lp.pool.watch.report(reasonUnsolicited)
		}
		l.closeUp(u)
	}
	return nil
}

// expired reports whether u, idle, has been so for its pool's idle timeout.
func (l *eloop) expired(u *uconn) bool {
	d := time.Duration(u.lp.pool.idleTimeout.Load())
	return d > 0 && l.now.Sub(u.idleFrom) >= d
}

// dial starts a non-blocking connect to lp's endpoint.
func (l *eloop) dial(lp *loopPool) (*uconn, error) {
	if err := config.CheckAddress(lp.ap.Addr(), lp.pool.allowLinkLocal.Load()); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	family := unix.AF_INET
	if lp.ap.Addr().Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	u := &uconn{fd: fd, lp: lp}
	err = unix.Connect(fd, lp.sa)
	switch err {
	case nil:
		u.state = uSending
	case unix.EINPROGRESS:
		u.state, u.deadline = uConnecting, l.after(time.Duration(lp.pool.connectTimeout.Load()))
	default:
		unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	u.events = unix.EPOLLOUT | unix.EPOLLIN | unix.EPOLLRDHUP
	if err := l.watch(fd, u.events, fdSlot{u: u}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	l.ups[u] = struct{}{}
	return u, nil
}

// upEvent handles an event on an endpoint connection.
func (l *eloop) upEvent(u *uconn, ev uint32) {
	switch u.state {
	case uIdle:
		// The endpoint closed it, or sent what nothing asked for (or the
		// event was meant for an earlier socket of the same number: see
		// event).
		switch peekFD(u.fd) {
		case idleClean:
			return
		case idleData:
			u.lp.pool.watch.report(reasonUnsolicited)
		}
		l.removeIdle(u)
		l.closeUp(u)
	case uConnecting:
		soerr, err := unix.GetsockoptInt(u.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && soerr != 0 {
			err = unix.Errno(soerr)
		}
		if err != nil {
			l.upFailed(u, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}, true)
			return
		}
		if ev&unix.EPOLLOUT == 0 {
			return
		}
		u.state, u.deadline = uSending, l.after(u.lp.pool.responseHeaderTimeout())
		if u.c != nil {
			l.flushUp(u)
		}
	case uSending:
		if ev&unix.EPOLLOUT != 0 {
			l.flushUp(u)
		}
		if u.state == uSending && ev&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0 {
			l.readUp(u)
		}
	case uWaiting, uBody:
		l.readUp(u)
	}
}

// flushUp writes what is left of the request on u.
func (l *eloop) flushUp(u *uconn) {
	for u.outOff < len(u.out) {
		n, err := rawWrite(u.fd, u.out[u.outOff:])
		if err == unix.EAGAIN || err == unix.EINTR {
			l.modify(u.fd, &u.events, unix.EPOLLOUT|unix.EPOLLIN|unix.EPOLLRDHUP)
			return
		}
		if err != nil {
			l.upFailed(u, os.NewSyscallError("write", err), false)
			return
		}
		u.outOff += n
	}
	u.state = uWaiting
	u.out, u.outOff = l.putBuf(u.out), 0
	l.modify(u.fd, &u.events, unix.EPOLLIN|unix.EPOLLRDHUP)
}

// readUp reads the endpoint's answer on u and relays it once it is in.
func (l *eloop) readUp(u *uconn) {
	n, err := l.readInto(u.fd, &u.in)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if n <= 0 {
		if err == nil {
			err = io.EOF
		} else {
			err = os.NewSyscallError("read", err)
		}
		if len(u.in) == 0 {
			l.upFailed(u, staleError{err}, false)
			return
		}
		// Cut in its head or body: the fasthttp front's parser and relay
		// take what came and count it as they do.
		l.continueAnswer(u.c, u)
		return
	}
	l.relay(u)
}

// relay answers the client of u once the endpoint's answer is in whole,
// or hands the exchange over when the loop does not relay it.
func (l *eloop) relay(u *uconn) {
	c := u.c
	end, bare := headEnd(u.in, u.scanned)
	if end < 0 {
		u.scanned = len(u.in)
		if bare || len(u.in) == cap(u.in) {
			// Bare LF line ends, which the fasthttp front's path reads, or
			// a head over the cap, which it answers 502.
			l.continueAnswer(c, u)
		}
		return
	}
	ctx := c.ctx
	a := &l.ah
	if err := a.parse(u.in[:end], ctx.Request.Header.IsHead()); err != nil || a.status < 200 {
		// Malformed (the fasthttp front's path says how, with the same
		// parser), or an interim answer with more heads to come.
		l.continueAnswer(c, u)
		return
	}
	code := a.status
	cl := a.bodyLength()
	var body []byte
	if a.framing != bodyNone {
		if cl < 0 || end+cl > cap(u.in) {
			l.continueAnswer(c, u) // streamed
			return
		}
		if len(u.in) < end+cl {
			u.state, u.deadline = uBody, time.Time{} // the rest of a small body
			return
		}
		body = u.in[end : end+cl]
	}
	copyAnswer(a, (*fastAnswer)(&ctx.Response.Header), c.rid)
	if body != nil {
		ctx.Response.SetBody(body)
	} else if a.length >= 0 && ctx.Request.Header.IsHead() {
		ctx.Response.Header.SetContentLength(int(a.length))
	}
	// A connection is kept when the answer was all it carried and the
	// request had gone out whole (an endpoint may answer early).
	clean := len(u.in) == end+len(body)
	if !clean {
		u.lp.pool.watch.report(reasonExtraBytes)
	}
	keep := !a.close && clean && u.outOff == len(u.out)
	x := c.x
	x.code, x.done = code, true
	l.s.p.answered(x.tg.up, x.a.ep, code)
	u.c, c.u = nil, nil
	if keep {
		l.putIdle(u)
	} else {
		l.closeUp(u)
	}
	l.answer(c)
}

// answer writes the answer of c's request, ends its exchange and gives
// its ctx back.
func (l *eloop) answer(c *lconn) {
	l.s.p.m.loopInline.Inc()
	ctx, x := c.ctx, c.x
	if x != nil {
		if x.tg != nil {
			x.finish(nil)
		} else {
			x.recycle()
		}
	}
	l.s.finishHead(ctx)
	c.out = l.render(c.out, func(bw *bufio.Writer) { _ = ctx.Response.Write(bw) })
	c.outOff = 0
	c.closeAfter = ctx.Response.ConnectionClose()
	c.ctx, c.x, c.rid, c.goneAt = nil, nil, "", time.Time{}
	loopCtxs.Put(ctx)
	c.state = cWrite
	l.flushClient(c)
}

// flushClient writes what is left of c's answer; once it is all out, c
// waits for its next request (or is closed).
func (l *eloop) flushClient(c *lconn) {
	for c.outOff < len(c.out) {
		n, err := rawWrite(c.fd, c.out[c.outOff:])
		if err == unix.EAGAIN || err == unix.EINTR {
			l.modify(c.fd, &c.events, unix.EPOLLOUT|unix.EPOLLRDHUP)
			c.deadline = l.after(l.s.p.stall)
			return
		}
		if err != nil {
			l.closeClient(c)
			return
		}
		c.outOff += n
	}
	c.out, c.outOff = l.putBuf(c.out), 0
	c.served = true
	if len(c.in) == 0 {
		c.in = l.putBuf(c.in)
	}
	if c.closeAfter || l.s.closing.Load() {
		l.closeClient(c)
		return
	}
	c.state, c.deadline = cIdle, l.after(l.s.idle)
	l.modify(c.fd, &c.events, unix.EPOLLIN|unix.EPOLLRDHUP)
	if len(c.in) > 0 {
		c.state, c.deadline = cHead, l.after(l.s.head)
		if !l.serving { // else the caller's loop serves the next one
			l.serveRequests(c)
		}
	}
}

// upFailed ends u, which failed before an answer head came (connect: the
// connect failed), and continues its exchange on the fasthttp front's
// path, which retries it or answers the failure.
func (l *eloop) upFailed(u *uconn, err error, connect bool) {
	c := u.c
	reused := u.reused
	// Any of the request written (all of it once the loop waits for the
	// answer) may have reached the endpoint.
	written := u.outOff > 0 || u.state == uWaiting || u.state == uBody
	l.closeUp(u)
	if c == nil {
		return
	}
	c.u = nil
	x := exchange{reused: reused, written: written}
	if !connect {
		x.conn = &upConn{} // connected: what mayHaveArrived and endpointFault judge
	}
	l.continueWith(c, x, err)
}

// putIdle gives u back to its pool, or closes it when the pool is full or
// closed.
func (l *eloop) putIdle(u *uconn) {
	lp := u.lp
	if len(lp.idle) >= maxIdlePerEndpoint || lp.pool.closed.Load() {
		l.closeUp(u)
		return
	}
	u.in, u.out = l.putBuf(u.in), l.putBuf(u.out)
	u.state, u.reused, u.idleFrom, u.deadline, u.scanned = uIdle, false, l.now, time.Time{}, 0
	l.modify(u.fd, &u.events, unix.EPOLLIN|unix.EPOLLRDHUP)
	lp.idle = append(lp.idle, u)
}

func (l *eloop) removeIdle(u *uconn) {
	lp := u.lp
	for i, v := range lp.idle {
		if v == u {
			lp.idle = append(lp.idle[:i], lp.idle[i+1:]...)
			return
		}
	}
}

// closeUp closes u.
func (l *eloop) closeUp(u *uconn) {
	if _, ok := l.ups[u]; !ok {
		return
	}
	delete(l.ups, u)
	l.forget(u.fd)
	unix.Close(u.fd)
	u.in, u.out = l.putBuf(u.in), l.putBuf(u.out)
}

// closeClient closes c; its exchange, if any, is counted as the client
// gone.
func (l *eloop) closeClient(c *lconn) {
	if !l.owns(c) {
		return
	}
	l.endExchange(c, statusClientGone)
	delete(l.conns, c)
	l.forget(c.fd)
	unix.Close(c.fd)
	l.s.open.Add(-1)
	c.in, c.out = l.putBuf(c.in), l.putBuf(c.out)
}

// abort ends c's exchange counted code and closes c.
func (l *eloop) abort(c *lconn, code int) {
	l.endExchange(c, code)
	l.closeClient(c)
}

// endExchange ends the exchange c has in flight, if any, counted code.
func (l *eloop) endExchange(c *lconn, code int) {
	if u := c.u; u != nil {
		u.c, c.u = nil, nil
		l.closeUp(u)
	}
	if x := c.x; x != nil {
		if x.tg != nil {
			x.code = code
			x.gone = code == statusClientGone
			x.finish(nil)
		} else {
			x.recycle()
		}
		c.x = nil
	}
	if c.ctx != nil {
		loopCtxs.Put(c.ctx)
		c.ctx = nil
	}
}

// getBuf returns an empty buffer of connBufferSize.
func (l *eloop) getBuf() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, 0, connBufferSize)
}

// putBuf keeps b for getBuf when it has the size (a grown answer buffer
// is left to the collector) and there is room, and returns nil, for the
// field that held it.
func (l *eloop) putBuf(b []byte) []byte {
	if cap(b) == connBufferSize && len(l.free) < maxFreeBuffers {
		l.free = append(l.free, b[:0])
	}
	return nil
}

// closeAll closes every connection of the loop.
func (l *eloop) closeAll() {
	for c := range l.conns {
		l.closeClient(c)
	}
	for u := range l.ups {
		l.closeUp(u)
	}
	for _, lp := range l.pools {
		lp.idle = nil
	}
}

// tick checks the deadlines: a client idle, reading a head or not taking
// its answer for too long is closed (a head begun is answered 408 first,
// as fasthttp does); an exchange whose client went away is given up; an
// endpoint that does not connect or answer in time fails its exchange;
// idle endpoint connections past the idle timeout are closed. It also
// puts the listener back once the connection count is below the cap, and
// when shutting down closes the idle clients.
func (l *eloop) tick() {
	now := l.now
	closing := l.s.closing.Load()
	l.sawTable(l.s.p.table.Load())
	for c := range l.conns {
		switch {
		case c.state == cWait:
			if !c.goneAt.IsZero() && !now.Before(c.goneAt) {
				l.closeClient(c) // counted 499
			}
		case closing && c.served && c.state == cIdle && len(c.in) == 0:
			// A request that came meanwhile is served (and the connection
			// closed after its answer); closing a socket with unread data
			// would reset it.
			l.clientEvent(c, unix.EPOLLIN)
			if l.owns(c) && c.state == cIdle && len(c.in) == 0 {
				l.closeClient(c)
			}
		case !c.deadline.IsZero() && !now.Before(c.deadline):
			if c.state == cHead && len(c.in) > 0 {
				l.timeoutHead(c)
			}
			l.closeClient(c)
		}
	}
	for u := range l.ups {
		switch {
		case u.state == uIdle:
			if l.expired(u) {
				l.removeIdle(u)
				l.closeUp(u)
			}
		case !u.deadline.IsZero() && !now.Before(u.deadline):
			if u.state == uConnecting {
				l.upFailed(u, errors.Join(errUpstreamTimeout, errors.New("connect timeout")), true)
			} else {
				l.upFailed(u, errUpstreamTimeout, false)
			}
		}
	}
	if l.paused && !closing && !l.stoppedAccept && (l.s.maxConns <= 0 || l.s.open.Load() < l.s.maxConns) {
		_ = l.watchListener()
	}
}

// timeoutHead answers a request head that did not arrive in time, as the
// fasthttp front's error handler does; what the socket does not take at
// once is lost with the connection.
func (l *eloop) timeoutHead(c *lconn) {
	var ctx fasthttp.RequestCtx
	ctx.Response.Header.SetNoDefaultContentType(true)
	ctx.Response.SetConnectionClose()
	fastProblem(&ctx, http.StatusRequestTimeout, "Request timeout", "the request head did not arrive in time")
	c.out = l.render(c.out, func(bw *bufio.Writer) { _ = ctx.Response.Write(bw) })
	_, _ = rawWrite(c.fd, c.out)
}

// goConn makes fd, which the loop no longer watches, a Go connection (the
// loop's descriptor is closed).
func goConn(fd int) (net.Conn, error) {
	_ = unix.SetNonblock(fd, true)
	f := os.NewFile(uintptr(fd), "loop")
	defer f.Close()
	return net.FileConn(f)
}

// release detaches c from the loop and returns it as a Go connection,
// which gives its slot back when closed, with the bytes read from it and
// not served.
func (l *eloop) release(c *lconn) (net.Conn, []byte, error) {
	delete(l.conns, c)
	l.forget(c.fd)
	rest := c.in
	nc, err := goConn(c.fd)
	if err != nil {
		l.s.open.Add(-1)
		return nil, nil, err
	}
	return &handedConn{Conn: nc, release: func() { l.s.open.Add(-1) }}, rest, nil
}

// handOver gives c, before its request was routed, to the fasthttp server,
// which serves it from what was read of it on.
func (l *eloop) handOver(c *lconn) {
	l.s.p.m.loopHandedOver.Inc()
	nc, rest, err := l.release(c)
	if err != nil {
		l.s.p.log.Warn("loop front: handing a connection over failed", "err", err)
		return
	}
	go l.s.serveConn(nc, rest)
}

// serveConn serves nc, whose first bytes were read already (rest), with the
// fasthttp server.
func (s *LoopServer) serveConn(nc net.Conn, rest []byte) {
	var c net.Conn = nc
	if len(rest) > 0 {
		c = &prefixConn{Conn: nc, buf: rest}
	}
	_ = s.fast.ServeConn(c)
}

// continueAnswer hands c's exchange over once the answer began on u, in
// u.in: the fasthttp front's parser reads it again, from there on.
func (l *eloop) continueAnswer(c *lconn, u *uconn) {
	fd, reused, in, deadline := u.fd, u.reused, u.in, u.deadline
	u.c, c.u = nil, nil
	delete(l.ups, u)
	l.forget(fd)
	x, ctx := c.x, c.ctx
	handed := l.handExchange(c, func(send sendFunc) (exchange, error) {
		un, err := goConn(fd)
		if err != nil {
			return exchange{conn: &upConn{}, reused: reused}, err
		}
		// The pools may keep it after this answer: it is one of theirs.
		uc := newUpConn(un, io.MultiReader(bytes.NewReader(in), un))
		_ = un.SetReadDeadline(deadline)
		if err := x.readAnswer(ctx, uc, nil); err != nil {
			un.Close()
			return exchange{conn: uc, reused: reused}, err
		}
		return exchange{conn: uc, reused: reused}, nil
	})
	if !handed {
		unix.Close(fd)
	}
}

// continueWith hands c's exchange over after its first attempt, x, failed
// with err: a pooled connection the endpoint had closed is replaced once by
// a new one, as roundTrip does, and retryFrom goes on from there.
func (l *eloop) continueWith(c *lconn, x exchange, err error) {
	fx := c.x
	// The loop serves requests without a body only.
	replay := safeMethod(b2s(c.ctx.Method()))
	l.handExchange(c, func(send sendFunc) (exchange, error) {
		if x.staleAgain(err, replay) && fx.Err() == nil {
			return fx.p.roundTrip(fx, fx.a.ep, send, true, replay)
		}
		return x, err
	})
}

// handExchange hands c, with its exchange, to a goroutine that goes on as
// the fasthttp front (exchangeOn), first giving the first attempt's result;
// it reports false, the exchange counted 502 and c closed, when c could not
// be made a Go connection.
func (l *eloop) handExchange(c *lconn, first func(sendFunc) (exchange, error)) bool {
	l.s.p.m.loopContinued.Inc()
	ctx, x, rid := c.ctx, c.x, c.rid
	nc, rest, err := l.release(c)
	if err != nil {
		x.code = http.StatusBadGateway
		x.finish(nil)
		loopCtxs.Put(ctx)
		l.s.p.log.Warn("loop front: handing an exchange over failed", "err", err)
		return false
	}
	go l.s.exchangeOn(nc, rest, ctx, x, rid, first)
	return true
}

// exchangeOn goes on with the exchange x of the request in ctx on the
// fasthttp front's path, with nc the client's connection (rest: what was
// read of it beyond the request): first (its result is the first attempt's,
// which retryFrom goes on from), then as fastForward and as fasthttp writes
// an answer; then the fasthttp server serves nc.
func (s *LoopServer) exchangeOn(nc net.Conn, rest []byte, ctx *fasthttp.RequestCtx, x *fastExchange, rid string, first func(sendFunc) (exchange, error)) {
	p := s.p
	ctx.Init2(nc, p.errorLog, false)
	finished := false
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		p.logPanic("panic serving a request", v, "request_id", rid)
		if !finished {
			x.code = http.StatusBadGateway
			x.finish(nil)
		}
		nc.Close()
	}()
	h := &ctx.Request.Header
	u := x.tg.up
	send := func(c *upConn, ep *endpoint) (bool, error) {
		return p.fastSend(ctx, c, ep, x, x.tg, rid, x.ip, 0, nil)
	}
	xc, err := first(send)
	xc, err = p.retryFrom(x, u, &x.a, outbound{
		method: b2s(h.Method()), requestID: rid, service: x.tg.hdrService[0],
	}, send, xc, err)
	streamed := false
	if err != nil {
		x.releaseUp()
		x.code = p.fastForwardError(ctx, x, route{tg: x.tg, ep: x.a.ep}, rid, err)
	} else {
		x.conn = xc.conn
		x.code = x.conn.head.status
		p.answered(u, x.a.ep, x.code)
		streamed = x.respond(ctx, rid)
	}
	if x.code == statusClientGone {
		finished = true
		x.finish(nil)
		nc.Close()
		loopCtxs.Put(ctx)
		return
	}
	if !streamed {
		finished = true
		x.finish(nil)
	}
	s.finishHead(ctx)
	if p.stall > 0 {
		_ = nc.SetWriteDeadline(time.Now().Add(p.stall))
	}
	bw := bufio.NewWriterSize(nc, connBufferSize)
	finished = true // a streamed body's exchange is finished when fasthttp closes the stream
	werr := ctx.Response.Write(bw)
	if werr == nil {
		werr = bw.Flush()
	}
	closeConn := werr != nil || ctx.Response.ConnectionClose()
	ctx.Response.Reset()
	ctx.Request.Reset()
	loopCtxs.Put(ctx)
	if closeConn {
		nc.Close()
		return
	}
	_ = nc.SetWriteDeadline(time.Time{})
	s.serveConn(nc, rest)
}

// finishHead adds to the answer in ctx what the fasthttp server adds to
// the answers it writes: Connection: close once shutting down, and its
// name as the Server field unless the endpoint sent one.
func (s *LoopServer) finishHead(ctx *fasthttp.RequestCtx) {
	if s.closing.Load() {
		ctx.Response.SetConnectionClose()
	}
	if name := s.fast.Name; name != "" && len(ctx.Response.Header.Server()) == 0 {
		ctx.Response.Header.SetServer(name)
	}
}

// handedConn is a client connection the loop handed over: its slot in
// the connection count is given back on the first Close.
type handedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *handedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap returns the socket, for fastPeerGone.
func (c *handedConn) Unwrap() net.Conn { return c.Conn }

// prefixConn reads buf before its connection.
type prefixConn struct {
	net.Conn
	buf []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Unwrap returns the connection, for fastPeerGone.
func (c *prefixConn) Unwrap() net.Conn { return c.Conn }
