//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"net"
	"syscall"
	"time"
	"unsafe"
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
// taken for clean. cleared reports that it cleared the socket's read
// deadline to look.
func (k *peeker) state(nc net.Conn) (st idleState, cleared bool) {
	if k.rc == nil {
		return idleClean, false
	}
	if k.rc.Read(k.look) != nil {
		// A read deadline of its last exchange has passed; the next
		// exchange sets its own.
		_ = nc.SetReadDeadline(time.Time{})
		if k.rc.Read(k.look) != nil {
			return idleClosed, true
		}
		return k.found, true
	}
	return k.found, false
}

// peekFD looks at the socket fd without reading it and without waiting.
// It is a raw system call, as a Socket's reads and writes are (see
// socket_linux.go): a peek that cannot wait never blocks, so the
// scheduler need not be told of it.
func peekFD(fd int) idleState {
	var b [1]byte
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN || e == syscall.EWOULDBLOCK:
			return idleClean
		case e != 0 || n == 0:
			return idleClosed
		}
		return idleData
	}
}
