//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"net"
	"syscall"
	"time"
)

// peeker looks at an idle connection's socket without reading it: one
// non-blocking MSG_PEEK of a byte. It is set up once per connection, so
// a look allocates nothing.
type peeker struct {
	rc    syscall.RawConn
	look  func(uintptr) bool // peek, as a method value made once
	found idleState
}

func (k *peeker) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	k.rc, k.look = rc, k.peek
}

func (k *peeker) peek(fd uintptr) bool {
	k.found = peekFD(int(fd))
	return true // never wait
}

// state is what nc's socket holds; a connection it cannot look at is
// taken for clean.
func (k *peeker) state(nc net.Conn) idleState {
	if k.rc == nil {
		return idleClean
	}
	if k.rc.Read(k.look) != nil {
		// A read deadline of its last exchange has passed; the next
		// exchange sets its own.
		_ = nc.SetReadDeadline(time.Time{})
		if k.rc.Read(k.look) != nil {
			return idleClosed
		}
	}
	return k.found
}

// peekFD looks at the socket fd without reading it and without waiting.
func peekFD(fd int) idleState {
	var b [1]byte
	for {
		n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			return idleClean
		case err != nil || n == 0:
			return idleClosed
		}
		return idleData
	}
}
