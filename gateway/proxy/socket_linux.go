package proxy

import (
	"io"
	"net"
	"os"
	"sync"
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
	// await is awaitIO, as a method value made once (WriteAwait).
	await func(uintptr) bool
}

// sockOp is one direction of a Socket: the call made under the RawConn
// (rawIO, as a method value made once) and the one under way.
type sockOp struct {
	mu    sync.Mutex
	wait  func(func(uintptr) bool) error // the RawConn's Read or Write
	call  func(uintptr) bool             // rawIO
	sysno uintptr                        // SYS_READ or SYS_WRITE
	p     []byte
	n     int
	errno syscall.Errno
}

// maxRW bounds one read or write call, as the standard library's does.
const maxRW = 1 << 30

// Init sets s up for the socket of nc (or of the connection it wraps,
// through Unwrap), when it is a TCP socket; otherwise s goes through nc.
func (s *Socket) Init(nc net.Conn) {
	for {
		if tc, ok := nc.(*net.TCPConn); ok {
			rc, err := tc.SyscallConn()
			if err != nil {
				return
			}
			s.rc = rc
			s.r.wait, s.r.call, s.r.sysno = rc.Read, s.r.rawIO, syscall.SYS_READ
			s.w.wait, s.w.call, s.w.sysno = rc.Write, s.w.rawIO, syscall.SYS_WRITE
			s.await = s.awaitIO
			return
		}
		u, ok := nc.(interface{ Unwrap() net.Conn })
		if !ok {
			return
		}
		nc = u.Unwrap()
	}
}

// Read reads from nc, whose socket s is, into p.
func (s *Socket) Read(nc net.Conn, p []byte) (int, error) {
	if s.rc == nil {
		return nc.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := s.r.run(nc, "read", p)
	if n == 0 && err == nil {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p to nc, whose socket s is, unless it fails.
func (s *Socket) Write(nc net.Conn, p []byte) (int, error) {
	if s.rc == nil {
		return nc.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	return s.w.run(nc, "write", p)
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

// run makes o's call on p under the RawConn, which waits for the socket
// between calls, and returns what it did as nc's op would.
func (o *sockOp) run(nc net.Conn, op string, p []byte) (int, error) {
	o.mu.Lock()
	o.p, o.n, o.errno = p, 0, 0
	err := o.wait(o.call)
	n, errno := o.n, o.errno
	o.p = nil
	o.mu.Unlock()
	switch {
	case err != nil:
		return n, poller(op, err)
	case errno != 0:
		return n, &net.OpError{Op: op, Net: "tcp", Source: nc.LocalAddr(), Addr: nc.RemoteAddr(),
			Err: os.NewSyscallError(op, errno)}
	}
	return n, nil
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
