package node

import (
	"syscall"
	"time"
)

// deferAccept returns the Control of a listener whose connections are
// handed to accept only once their first bytes have come (TCP_DEFER_ACCEPT),
// waiting up to wait for them; a connection still silent by then is
// handed over as it is, and the head timeout takes it from there.
func deferAccept(wait time.Duration) func(network, address string, c syscall.RawConn) error {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	return func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, secs)
		}); err != nil {
			return err
		}
		return serr
	}
}
