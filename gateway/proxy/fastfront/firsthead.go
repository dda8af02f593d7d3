package fastfront

import (
	"crypto/tls"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
)

// The first request head of a connection is bounded from the accept, as
// the net/http front's ReadHeaderTimeout bounds it: a client that waits
// most of the timeout and then sends its head a byte at a time must not
// get the timeout twice. fasthttp sets its ReadTimeout as a read deadline
// when it begins to serve a connection, but with ReduceMemoryUsage (which
// NewServer sets, so that an idle keep-alive connection holds no write
// buffer) it sets the deadline again once the first byte has come. A
// FirstHeadConn under the connection keeps that second deadline at the
// first: until the handler marks the first head read (requestBegins, at the
// start of ServeFastHTTP), no read deadline it is given may be later than
// the first one, nor none at all. After that, deadlines pass unchanged:
// the head of each later request is bounded from its first byte, after
// the keep-alive wait, as fasthttp does for every connection.

// FirstHeadConn is a connection whose first request head is bounded from
// the first read deadline set on it (see above). Build it with
// NewFirstHeadConn; it is safe for concurrent use as its connection is.
type FirstHeadConn struct {
	net.Conn
	// by is the first read deadline set, in Unix nanoseconds: 0 while none
	// was set, released once the first head is read or the connection
	// carries no HTTP/1.1 (Release).
	by atomic.Int64
	// sock reads and writes the socket under the connection; held is
	// the buffer it holds a write in (JoinNextWrite), made by the first.
	sock proxy.Socket
	held *[holdSize]byte
	// joins counts the writes to be held for the one after them
	// (JoinNextWrite); joinBy writes them if none comes within wait
	// (joinWait but in tests).
	joins  atomic.Int32
	joinBy *time.Timer
	wait   time.Duration

	// readOnce is set by the first read. ahead[aheadAt:aheadN] is what
	// that read took past the one byte it was asked for (readFirst), for
	// the reads after it; nil once they took it all.
	readOnce        bool
	ahead           *[aheadSize]byte
	aheadAt, aheadN int

	// rd and wd are the read and write deadlines, kept as numbers that
	// the sweeper enforces (deadline.go); dmu orders putting a deadline
	// on the socket and taking it off. swept is set while the sweeper
	// holds the connection, in its shard's list (prev, next, under the
	// shard's lock; closed once Close let go of it for good).
	rd, wd     coarseDeadline
	dmu        sync.Mutex
	swept      atomic.Bool
	prev, next *FirstHeadConn
	closed     bool
	shard      uint8 // the sweeper's list it goes in

	// spliceTo, while a request body's read is armed (armSplice), is the
	// endpoint connection a read into the buffer at spliceAt moves its
	// bytes to by splice instead; spliced reports that the last armed read
	// did. noSplice: a splice found the sockets cannot (TLS under the
	// connection, no pipe), so reads stay reads.
	spliceTo *proxy.Conn
	spliceAt *byte
	spliced  bool
	noSplice bool

	// peer[:peerN] is the client's IP address as requests send it on
	// (X-Forwarded-For) and the logs write it, formatted by the
	// connection's first request (clientIP).
	peer  [peerSize]byte
	peerN uint8
}

// peerSize bounds the client address a FirstHeadConn keeps formatted: an
// IPv6 address with a zone fits.
const peerSize = 64

// aheadSize is how much the first read of a connection takes when it is
// asked for one byte: a request head, most often whole.
const aheadSize = 4 << 10

// aheadBuffers holds the buffers of readFirst between connections.
var aheadBuffers = sync.Pool{New: func() any { return new([aheadSize]byte) }}

// joinWait bounds how long a write held for the next one (JoinNextWrite)
// waits for it: past it, the bytes go out alone.
const joinWait = time.Millisecond

// holdSize bounds a write the connection holds for the next one: the
// buffer stays with the connection.
const holdSize = 1 << 10

// released is FirstHeadConn.by once its deadlines pass unchanged.
const released = -1

// NewFirstHeadConn wraps c, a connection the fasthttp front (a server of
// NewServer's) is to serve, so that its first request head is bounded from
// the first read deadline set on it.
func NewFirstHeadConn(c net.Conn) *FirstHeadConn {
	fc := &FirstHeadConn{Conn: c, wait: joinWait, shard: uint8(shardSeq.Add(1) % sweepShards)}
	fc.sock.Init(c)
	return fc
}

// Read reads from the connection's socket, writing first what it holds.
func (c *FirstHeadConn) Read(p []byte) (int, error) {
	if c.ahead != nil {
		return c.readAhead(p), nil
	}
	if !c.readOnce {
		c.readOnce = true
		if len(p) == 1 {
			return c.readFirst(p)
		}
	}
	if c.spliceTo != nil && len(p) > 0 && &p[0] == c.spliceAt {
		return c.spliceRead(p)
	}
	return c.sock.Read(c.Conn, p)
}

// armSplice makes the next reads into buf (a request body's reader
// reading straight from the connection into it, past its own buffer)
// move their bytes to the endpoint connection to instead: up to len(buf)
// a read, buf untouched. disarmSplice ends it and reports whether a read
// was spliced since.
func (c *FirstHeadConn) armSplice(to *proxy.Conn, buf []byte) {
	if c.noSplice || len(buf) == 0 {
		return
	}
	c.spliceTo, c.spliceAt, c.spliced = to, &buf[0], false
}

func (c *FirstHeadConn) disarmSplice() (spliced bool) {
	spliced = c.spliced
	c.spliceTo, c.spliceAt, c.spliced = nil, nil, false
	return spliced
}

// spliceRead is an armed read: up to len(p) bytes from the client's
// socket to the endpoint's by splice, after what this side holds to
// write (an interim answer waiting to be joined: the client may wait for
// it before it sends the body).
func (c *FirstHeadConn) spliceRead(p []byte) (int, error) {
	if err := c.sock.Flush(c.Conn); err != nil {
		return 0, err
	}
	n, err := c.spliceTo.SpliceBodyFrom(&c.sock, c.Conn, int64(len(p)))
	if err == proxy.ErrNoSplice {
		c.noSplice = true
		return c.sock.Read(c.Conn, p)
	}
	c.spliced = c.spliced || n > 0
	return int(n), err
}

// readFirst is the first read of the connection when it asks for one
// byte, as fasthttp's first read of a new connection does (with
// ReduceMemoryUsage, it waits for the first byte alone, then reads the
// head into its buffer): it reads up to aheadSize, and keeps what is past
// the byte for the next reads, which would otherwise each be a system
// call of their own.
func (c *FirstHeadConn) readFirst(p []byte) (int, error) {
	buf := aheadBuffers.Get().(*[aheadSize]byte)
	n, err := c.sock.Read(c.Conn, buf[:])
	if n == 0 {
		aheadBuffers.Put(buf)
		return 0, err
	}
	p[0] = buf[0]
	if n == 1 {
		aheadBuffers.Put(buf)
	} else {
		c.ahead, c.aheadAt, c.aheadN = buf, 1, n
	}
	// An error past the bytes read comes again from the next read.
	return 1, nil
}

// readAhead reads into p from what readFirst kept.
func (c *FirstHeadConn) readAhead(p []byte) int {
	n := copy(p, c.ahead[c.aheadAt:c.aheadN])
	c.aheadAt += n
	if c.aheadAt == c.aheadN {
		aheadBuffers.Put(c.ahead)
		c.ahead = nil
	}
	return n
}

// Write writes to the connection's socket, or holds p for the next
// write (JoinNextWrite). A write that meets bytes held writes them
// first, in the same call when both fit the buffer.
func (c *FirstHeadConn) Write(p []byte) (int, error) {
	if c.joins.Load() > 0 && c.sock.HeldLen() == 0 && c.takeJoin() && c.hold(p) {
		if c.joinBy == nil {
			c.joinBy = time.AfterFunc(c.wait, func() { _ = c.sock.Flush(c.Conn) })
		} else {
			c.joinBy.Reset(c.wait)
		}
		return len(p), nil
	}
	return c.sock.Write(c.Conn, p)
}

// hold holds p (proxy.Socket.Hold), in a buffer made the first time.
// Writes are serialized, and nothing reads the buffer before a write
// holds bytes in it.
func (c *FirstHeadConn) hold(p []byte) bool {
	if c.held == nil {
		c.held = new([holdSize]byte)
		c.sock.HoldIn(c.held[:])
	}
	return c.sock.Hold(p)
}

// JoinNextWrite asks that the next write on the connection be held and
// written with the one after it, in one call, when both fit the buffer,
// or alone after joinWait. It is for HTTP/2 (the net/http server over
// this connection's TLS): an answer in memory goes out as a HEADERS frame
// and a DATA frame, each in a TLS record of its own, and the server writes
// the first before the handler hands over the second, so that without
// this each answer costs two writes where one does. The writes of a
// connection must be serialized, as tls.Conn serializes them; any
// goroutine may call JoinNextWrite.
func (c *FirstHeadConn) JoinNextWrite() { c.joins.Add(1) }

// takeJoin takes one of the writes JoinNextWrite asked for, if any is left.
func (c *FirstHeadConn) takeJoin() bool {
	for {
		n := c.joins.Load()
		if n <= 0 {
			return false
		}
		if c.joins.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// Close writes what the connection holds and closes it.
func (c *FirstHeadConn) Close() error {
	_ = c.sock.Flush(c.Conn)
	sweep.remove(c)
	return c.Conn.Close()
}

// SetReadDeadline sets the read deadline t, held at the first deadline
// set while the first request head is read.
func (c *FirstHeadConn) SetReadDeadline(t time.Time) error {
	switch by := c.by.Load(); {
	case by == released:
	case by == 0:
		if !t.IsZero() {
			c.by.CompareAndSwap(0, t.UnixNano())
		}
	case t.IsZero() || t.UnixNano() > by:
		t = time.Unix(0, by)
	}
	return c.rd.set(c, t, setSocketRead)
}

// SetWriteDeadline sets the write deadline t (a coarse one: deadline.go).
func (c *FirstHeadConn) SetWriteDeadline(t time.Time) error {
	return c.wd.set(c, t, setSocketWrite)
}

// SetDeadline sets the read and the write deadline t.
func (c *FirstHeadConn) SetDeadline(t time.Time) error {
	err := c.SetReadDeadline(t)
	if werr := c.SetWriteDeadline(t); err == nil {
		err = werr
	}
	return err
}

// Release lets every later deadline pass unchanged: the first head was
// read, or the connection does not carry HTTP/1.1 (h2 after ALPN).
func (c *FirstHeadConn) Release() { c.by.Store(released) }

// ReadFrom is how fasthttp's buffered writer hands over the rest of an
// answer's body that fastBody.WriteTo offered as a spliceBody, once the
// head and the start of the body in its buffer are written: it moves
// from the endpoint's socket to this one (spliceBody.spliceTo). Any
// other reader is copied.
func (c *FirstHeadConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if s, ok := lr.R.(*spliceBody); ok {
			n, err := s.spliceTo(c, lr.N)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(writerOnly{c}, r)
}

// Unwrap returns the connection under c, for code that needs the
// concrete type (PeerGone, TCP options).
func (c *FirstHeadConn) Unwrap() net.Conn { return c.Conn }

// Listener returns ln with each connection it accepts wrapped in a
// FirstHeadConn: the listener a server of NewServer's serves plain
// connections from (Front.Serve does).
func Listener(ln net.Listener) net.Listener { return firstHeadListener{ln} }

type firstHeadListener struct{ net.Listener }

func (l firstHeadListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return NewFirstHeadConn(c), nil
}

// requestBegins is called as the handler begins a request on c, a
// connection the front serves: the first head is in (deadlines pass
// unchanged from here).
func requestBegins(c net.Conn, first bool) {
	if !first {
		return
	}
	if fc := firstHead(c); fc != nil {
		fc.Release()
	}
}

// firstHead is the FirstHeadConn c is, itself or under TLS, or nil.
func firstHead(c net.Conn) *FirstHeadConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	fc, _ := c.(*FirstHeadConn)
	return fc
}

// clientIP returns the IP address of the client of c, a connection the
// front serves, formatted into buf unless the FirstHeadConn under c keeps
// it formatted already (from its first request on): the address of a
// connection does not change between its requests.
func clientIP(c net.Conn, buf []byte) []byte {
	fc := firstHead(c)
	if fc == nil {
		return peerIP(buf, c.RemoteAddr())
	}
	if fc.peerN == 0 {
		ip := peerIP(buf, fc.RemoteAddr())
		if len(ip) == 0 || len(ip) > peerSize {
			return ip
		}
		fc.peerN = uint8(copy(fc.peer[:], ip))
	}
	return fc.peer[:fc.peerN]
}
