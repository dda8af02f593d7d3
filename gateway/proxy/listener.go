package proxy

import (
	"net"
	"sync"
	"sync/atomic"
)

// limitListener caps the connections a listener has open at once: Accept
// waits for one of them to close before it accepts another, so further
// clients wait in the kernel's accept queue (and past it, are refused by
// the kernel) instead of each costing the process a goroutine and buffers.
// Close unblocks a waiting Accept.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// LimitListener returns ln capped at n open connections; n <= 0 returns ln as is.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		return ln
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, l: l}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot in l back once, on the first Close.
type limitConn struct {
	net.Conn
	l        *limitListener
	released atomic.Bool
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	if c.released.CompareAndSwap(false, true) {
		<-c.l.sem
	}
	return err
}

// Unwrap returns the connection under the slot, for code that needs the
// concrete type (TCP options).
func (c *limitConn) Unwrap() net.Conn { return c.Conn }

// ListenerGate is the listener a front's Serve was given, for Shutdown to
// close: so that a Serve that comes after Shutdown, or races it, returns
// at once instead of serving a server already shut down. The zero value
// is open. Safe for concurrent use.
type ListenerGate struct {
	mu     sync.Mutex
	ln     net.Listener
	closed bool
}

// Serve records ln as the listener served and reports true; once close
// was called, it closes ln and reports false.
func (g *ListenerGate) Serve(ln net.Listener) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		_ = ln.Close()
		return false
	}
	g.ln = ln
	return true
}

// Close closes the listener served, if any, and makes serve refuse.
func (g *ListenerGate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.ln != nil {
		_ = g.ln.Close()
	}
}
