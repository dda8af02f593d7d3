//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"net"
	"time"
)

// PeerGone reports whether the peer of c has gone away: its side of
// the connection has ended (an end of file: closed, or shut down for
// writing, which the net/http server takes for gone as well) or was
// reset. It peeks at the socket without waiting and without reading
// (MSG_PEEK), so pending data stays for the server; with pending data
// (a pipelined request, or a TLS close_notify) it cannot see past it and
// reports false. A connection it cannot peek at (not a socket, nor one
// wrapped by a TLS connection or a type with an Unwrap method, as a
// listener's connection limit wraps them) is not gone. The caller must
// not be reading c meanwhile.
func PeerGone(c net.Conn) bool {
	sc, ok := socketOf(c)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	peek := func(fd uintptr) bool {
		gone = peekFD(int(fd)) == idleClosed
		return true // never wait
	}
	if rc.Read(peek) != nil {
		// The server's request-head deadline has passed: the request is
		// long in, and the deadline is the server's to set again.
		_ = c.SetReadDeadline(time.Time{})
		if rc.Read(peek) != nil {
			return false
		}
	}
	return gone
}
