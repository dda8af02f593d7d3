package fastfront

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
	"github.com/valyala/fasthttp"
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
	// sock reads and writes the socket under the connection.
	sock proxy.Socket
	// whole: the next write is the whole of an answer (AnswerWhole), to
	// be held in held and written by the next read (proxy.Socket.Hold).
	whole bool
	held  [holdSize]byte
}

// holdSize bounds an answer the connection holds for its next read: a
// small answer is most of a small request's cost, and the buffer stays
// with the connection.
const holdSize = 1 << 10

// released is FirstHeadConn.by once its deadlines pass unchanged.
const released = -1

// NewFirstHeadConn wraps c, a connection the fasthttp front (a server of
// NewServer's) is to serve, so that its first request head is bounded from
// the first read deadline set on it.
func NewFirstHeadConn(c net.Conn) *FirstHeadConn {
	fc := &FirstHeadConn{Conn: c}
	fc.sock.Init(c)
	fc.sock.HoldIn(fc.held[:])
	return fc
}

// Read reads from the connection's socket, writing first an answer it
// holds.
func (c *FirstHeadConn) Read(p []byte) (int, error) { return c.sock.Read(c.Conn, p) }

// Write writes to the connection's socket. The whole of an answer
// (AnswerWhole) that fits is held instead, for the next read to write
// inside its wait for the next request: the keep-alive wait then costs no
// read of an empty socket. It goes out at once on anything else the
// connection does: a write, a close.
func (c *FirstHeadConn) Write(p []byte) (int, error) {
	if c.whole {
		c.whole = false
		if c.sock.Hold(p) {
			return len(p), nil
		}
	}
	return c.sock.Write(c.Conn, p)
}

// Close writes an answer held and closes the connection.
func (c *FirstHeadConn) Close() error {
	_ = c.sock.Flush(c.Conn)
	return c.Conn.Close()
}

// AnswerWhole marks the next write on the connection as the whole of an
// answer, to be held for the next read. Only the goroutine serving the
// connection may call it, before the answer is written.
func (c *FirstHeadConn) AnswerWhole() { c.whole = true }

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
	return c.Conn.SetReadDeadline(t)
}

// Release lets every later deadline pass unchanged: the first head was
// read, or the connection does not carry HTTP/1.1 (h2 after ALPN).
func (c *FirstHeadConn) Release() { c.by.Store(released) }

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

// answerWhole marks the answer to the request of ctx as written whole
// by its next write (FirstHeadConn.AnswerWhole), when its connection is
// a FirstHeadConn, itself or under TLS.
func answerWhole(ctx *fasthttp.RequestCtx) {
	if fc := firstHead(ctx.Conn()); fc != nil {
		fc.AnswerWhole()
	}
}

// requestBegins is called as the handler begins a request on c, a
// connection the front serves: the first head is in (deadlines pass
// unchanged from here), and an answer held for the next read goes out
// now, since a request read ahead (pipelined) is served before that
// read, and its answer may take long.
func requestBegins(c net.Conn, first bool) {
	fc := firstHead(c)
	if fc == nil {
		return
	}
	if first {
		fc.Release()
	}
	fc.whole = false
	_ = fc.sock.Flush(fc.Conn)
}

// firstHead is the FirstHeadConn c is, itself or under TLS, or nil.
func firstHead(c net.Conn) *FirstHeadConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	fc, _ := c.(*FirstHeadConn)
	return fc
}
