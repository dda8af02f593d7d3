package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Socket reads and writes a TCP connection's socket with raw system calls,
// through its syscall.RawConn: the poller still waits for the socket (and
// for its deadlines) as a net.Conn's Read and Write do, but the read or
// write itself does not tell the scheduler it entered a system call.
//
// Go's scheduler takes the processor from a goroutine that stays in a
// system call for 20 µs and starts another thread to run the rest; the
// goroutine, once back, waits for a processor again. That pays off for a
// call that blocks. A read or write of a non-blocking socket does not
// block, however long it takes (on loopback a write also runs the
// receiving side's TCP input): the thread is busy on the CPU throughout,
// and handing its processor over only adds thread wake-ups and context
// switches (docs/performance.md has the counts per request).
//
// A Socket is safe for the concurrent use a net.Conn allows: reads are
// serialized with reads and writes with writes. The zero Socket (or one
// whose connection has no raw socket) reads and writes through the
// connection.
type Socket struct {
	rc syscall.RawConn
	// r and w are the reads and the writes.
	r, w sockOp
	// await is awaitIO, as a method value made by the first WriteAwait
	// (under w.mu): only connections to endpoints wait for an answer.
	await func(uintptr) bool

	// hold is the buffer Hold keeps bytes in (HoldIn);
	// hn is how much of it is held (0: nothing), set under w.mu.
	hold []byte
	hn   atomic.Int32
	// afterHeld is afterHeldIO, as a method value made by HoldIn (only a
	// connection that holds bytes reads after them); writing is set while
	// the held bytes are being written under w.mu, which afterHeldIO lets
	// go of once they are out.
	afterHeld func(uintptr) bool
	writing   bool
	heldErr   syscall.Errno
}

// sockOp is one direction of a Socket: the call made under the RawConn
// (rawIO, as a method value made once) and the one under way.
type sockOp struct {
	mu    sync.Mutex
	call  func(uintptr) bool // rawIO
	sysno uintptr            // SYS_READ or SYS_WRITE
	p     []byte
	n     int
	errno syscall.Errno
}

// maxRW bounds one read or write call, as the standard library's does.
const maxRW = 1 << 30

// Init sets s up for the socket of nc (or of the connection it wraps,
// through Unwrap), when it is a TCP socket; otherwise s goes through nc.
// It makes three allocations (the RawConn and the two calls made under
// it); the calls only some connections make are made on their first use.
func (s *Socket) Init(nc net.Conn) {
	for {
		if tc, ok := nc.(*net.TCPConn); ok {
			rc, err := tc.SyscallConn()
			if err != nil {
				return
			}
			s.rc = rc
			s.r.call, s.r.sysno = s.r.rawIO, syscall.SYS_READ
			s.w.call, s.w.sysno = s.w.rawIO, syscall.SYS_WRITE
			return
		}
		u, ok := nc.(interface{ Unwrap() net.Conn })
		if !ok {
			return
		}
		nc = u.Unwrap()
	}
}

// Read reads from nc, whose socket s is, into p. Bytes held (Hold) are
// written first, inside the wait for what there is to read.
func (s *Socket) Read(nc net.Conn, p []byte) (int, error) {
	if s.rc == nil {
		return nc.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if s.hn.Load() != 0 {
		return s.readAfterHeld(nc, p)
	}
	n, err := s.r.run(s.rc, nc, "read", p)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p to nc, whose socket s is, unless it fails. Bytes
// held (Hold) go first: in the same call, when p fits after them in the
// buffer of HoldIn.
func (s *Socket) Write(nc net.Conn, p []byte) (int, error) {
	if s.rc == nil {
		return nc.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if s.hn.Load() != 0 {
		s.w.mu.Lock()
		n := int(s.hn.Load())
		joined := n > 0 && n+len(p) <= len(s.hold)
		if joined {
			s.hn.Store(int32(n + copy(s.hold[n:], p)))
		}
		err := s.flushLocked(nc)
		s.w.mu.Unlock()
		switch {
		case err != nil:
			return 0, err
		case joined:
			return len(p), nil
		}
	}
	return s.w.run(s.rc, nc, "write", p)
}

// HoldIn gives s the buffer Hold keeps bytes in; nothing is held
// without one. Call it before the first Hold, from the goroutine that
// writes. (The read that comes after held bytes sees what HoldIn set
// through the count of bytes held, which Hold stores atomically.)
func (s *Socket) HoldIn(buf []byte) {
	if s.afterHeld == nil {
		s.afterHeld = s.afterHeldIO
	}
	s.hold = buf
}

// Hold keeps a copy of p, to be written by the next Read, Write or Flush
// of s, whichever comes first, instead of now: a Write joins its bytes to
// them in one call when they fit. It reports false, keeping nothing, when
// p does not fit the buffer of HoldIn, when bytes are held already, or
// when s has no raw socket; the caller then writes p itself. Whoever
// holds bytes must see that one of those comes (fastfront.FirstHeadConn
// has a timer), and whoever ends the connection must Flush before
// closing it.
func (s *Socket) Hold(p []byte) bool {
	if s.rc == nil || len(p) == 0 || len(p) > len(s.hold) {
		return false
	}
	s.w.mu.Lock()
	free := s.hn.Load() == 0
	if free {
		s.hn.Store(int32(copy(s.hold, p)))
	}
	s.w.mu.Unlock()
	return free
}

// HeldLen is the number of bytes held.
func (s *Socket) HeldLen() int { return int(s.hn.Load()) }

// Flush writes the bytes held, if any, under nc's write deadline.
func (s *Socket) Flush(nc net.Conn) error {
	if s.rc == nil || s.hn.Load() == 0 {
		return nil
	}
	s.w.mu.Lock()
	err := s.flushLocked(nc)
	s.w.mu.Unlock()
	return err
}

// flushLocked is Flush with s.w.mu held.
func (s *Socket) flushLocked(nc net.Conn) error {
	n := int(s.hn.Load())
	if n == 0 {
		return nil
	}
	s.hn.Store(0)
	o := &s.w
	o.p, o.n, o.errno = s.hold[:n], 0, 0
	err := o.result(nc, "write", s.rc.Write(o.call))
	o.p = nil
	return err
}

// readAfterHeld is Read with bytes held: they are written by the first
// call under the RawConn's wait for reading (afterHeldIO), which then
// reads, waiting for the socket when it has nothing yet. A socket
// that takes only part of them has the rest written under the write
// deadline before the read; a wait that ends before any call (a read
// deadline passed, the connection closed) leaves them held, for the
// Flush of whoever closes the connection.
func (s *Socket) readAfterHeld(nc net.Conn, p []byte) (int, error) {
	r, w := &s.r, &s.w
	w.mu.Lock()
	held := int(s.hn.Load())
	if held == 0 { // flushed meanwhile
		w.mu.Unlock()
		return s.Read(nc, p)
	}
	s.hn.Store(0)
	r.mu.Lock()
	w.p, w.n, w.errno = s.hold[:held], 0, 0
	r.p, r.n, r.errno = p, 0, 0
	s.writing, s.heldErr = true, 0
	err := s.rc.Read(s.afterHeld)
	if s.writing {
		// No call was made (err: a read deadline passed, the connection
		// closed), or the socket took part of the bytes.
		s.writing = false
		if err != nil {
			s.hn.Store(int32(copy(s.hold, w.p)))
			err = poller("read", err)
		} else {
			err = w.result(nc, "write", s.rc.Write(w.call))
		}
		w.p = nil
		w.mu.Unlock()
		if err != nil {
			r.p = nil
			r.mu.Unlock()
			return 0, err
		}
		err = s.rc.Read(r.call)
	} else if s.heldErr != 0 {
		w.errno, s.heldErr = s.heldErr, 0
		err = w.result(nc, "write", nil)
		w.errno = 0
		r.p = nil
		r.mu.Unlock()
		return 0, err
	}
	n := r.n
	if err = r.result(nc, "read", err); err == nil && n == 0 {
		err = io.EOF
	}
	r.p = nil
	r.mu.Unlock()
	return n, err
}

// afterHeldIO is readAfterHeld's call under the RawConn's Read: the
// first call writes the held bytes and, once they are all out, lets go
// of the write lock and reads; the next ones read. A failed write ends
// the wait at once (its error in heldErr), and so does a socket that
// takes only part of them, with the write lock still held for
// readAfterHeld to finish.
//
// The read right after the write is not to be skipped, however sure the
// caller is that the peer waits for the held bytes: the RawConn's Read
// forgets the socket's readiness as it begins, so bytes that came before
// it (a request pipelined behind the one answered, any HTTP/2 frame)
// would wake no wait; only a read finds them.
func (s *Socket) afterHeldIO(fd uintptr) bool {
	if !s.writing {
		return s.r.rawIO(fd)
	}
	w := &s.w
	if !w.rawIO(fd) {
		return true // part of them
	}
	s.writing, s.heldErr = false, w.errno
	w.p, w.errno = nil, 0
	w.mu.Unlock()
	if s.heldErr != 0 {
		return true
	}
	return s.r.rawIO(fd)
}

// WriteAwait writes all of p to nc, as Write does, then waits until the
// socket has something to read, under nc's read deadline: p is the end of
// a request, and what comes next is its answer. The write is made inside
// the RawConn's wait for reading, so that readiness is armed before the
// request leaves: the read that follows finds the answer without first
// meeting an empty socket (one read call, not two, and the goroutine
// parks once). nc's read deadline must be set (the answer's); a wait cut
// by it, or by a close, is not the write's failure: WriteAwait returns
// the bytes written, and the read that follows meets the same end. When
// the socket takes only part of p, the rest is written as Write does,
// without the wait.
//
// A WriteAwait must not run beside a read of nc.
func (s *Socket) WriteAwait(nc net.Conn, p []byte) (int, error) {
	if s.rc == nil {
		return nc.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	o := &s.w
	o.mu.Lock()
	if s.await == nil {
		s.await = s.awaitIO
	}
	o.p, o.n, o.errno = p, 0, 0
	_ = s.rc.Read(s.await)
	n, errno, rest := o.n, o.errno, o.p
	o.p = nil
	o.mu.Unlock()
	switch {
	case errno != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(),
			Err: os.NewSyscallError("write", errno)}
	case len(rest) > 0:
		// The socket's buffer was full, or the wait ended before the
		// write was made: write the rest the usual way.
		m, err := s.Write(nc, rest)
		return n + m, err
	}
	return n, nil
}

// awaitIO is WriteAwait's call under the RawConn's Read: the first call
// writes s.w.p (false, to wait for the socket to be readable, once all
// of it went out), the next one, with nothing left to write, ends the
// wait. A failure, or a socket buffer that takes only part (Write
// finishes), ends it at once.
func (s *Socket) awaitIO(fd uintptr) bool {
	o := &s.w
	if len(o.p) == 0 {
		return true
	}
	return !o.rawIO(fd) || o.errno != 0
}

// run makes o's call on p under rc, which waits for the socket between
// calls, and returns what it did as nc's op would.
func (o *sockOp) run(rc syscall.RawConn, nc net.Conn, op string, p []byte) (int, error) {
	o.mu.Lock()
	o.p, o.n, o.errno = p, 0, 0
	var err error
	if o.sysno == syscall.SYS_READ {
		err = rc.Read(o.call)
	} else {
		err = rc.Write(o.call)
	}
	err = o.result(nc, op, err)
	n := o.n
	o.p = nil
	o.mu.Unlock()
	return n, err
}

// result is the error of o's last call as nc's op would return it: err,
// the RawConn's (a deadline, the connection closed), or the call's own.
func (o *sockOp) result(nc net.Conn, op string, err error) error {
	switch {
	case err != nil:
		return poller(op, err)
	case o.errno != 0:
		return &net.OpError{Op: op, Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(),
			Err: os.NewSyscallError(op, o.errno)}
	}
	return nil
}

// rawIO is the call of o under the RawConn: one read into o.p, or
// writes until all of o.p went out; false (EAGAIN) waits for the socket.
func (o *sockOp) rawIO(fd uintptr) bool {
	for {
		chunk := o.p[:min(len(o.p), maxRW)]
		r, _, e := syscall.RawSyscall(o.sysno, fd, uintptr(unsafe.Pointer(&chunk[0])), uintptr(len(chunk)))
		switch e {
		case 0:
			o.n += int(r)
			o.p = o.p[r:]
			if o.sysno == syscall.SYS_READ || len(o.p) == 0 {
				return true
			}
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
}

// poller names the failed wait of a RawConn (a deadline, the connection
// closed) as the connection's own read or write would.
func poller(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
	}
	return err
}
