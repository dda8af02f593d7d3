package fastfront

import (
	"crypto/tls"
	"net"
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
// first: until the handler marks the first head read (headRead, at the
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
}

// released is FirstHeadConn.by once its deadlines pass unchanged.
const released = -1

// NewFirstHeadConn wraps c, a connection the fasthttp front (a server of
// NewServer's) is to serve, so that its first request head is bounded from
// the first read deadline set on it.
func NewFirstHeadConn(c net.Conn) *FirstHeadConn {
	fc := &FirstHeadConn{Conn: c}
	fc.sock.Init(c)
	return fc
}

// Read reads from the connection's socket.
func (c *FirstHeadConn) Read(p []byte) (int, error) { return c.sock.Read(c.Conn, p) }

// Write writes to the connection's socket.
func (c *FirstHeadConn) Write(p []byte) (int, error) { return c.sock.Write(c.Conn, p) }

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

// headRead releases the FirstHeadConn under c, a connection the front
// serves (itself, or under its TLS connection), if there is one.
func headRead(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if fc, ok := c.(*FirstHeadConn); ok {
		fc.Release()
	}
}
