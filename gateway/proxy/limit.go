package proxy

import (
	"net"
	"sync"
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

// limit returns ln capped at n open connections; n <= 0 returns ln as is.
func limit(ln net.Listener, n int) net.Listener {
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
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// Unwrap returns the connection under the slot, for code that needs the
// concrete type (TCP options).
func (c *limitConn) Unwrap() net.Conn { return c.Conn }
