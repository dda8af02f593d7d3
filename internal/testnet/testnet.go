// Package testnet gives tests network addresses that behave in a known
// way. It is for tests only.
package testnet

import (
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ClosedAddr returns a loopback address ("127.0.0.1:port") where nothing
// listens, so a connection to it is refused, for as long as the test
// runs: the port is held by a socket bound to it that never listens
// (closedPort), so no other listener, of this test or of another process,
// takes it meanwhile. It fails the test (t.Fatal) when it cannot find one.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	return closedPort(t)
}

// HungAddr returns the address of a loopback listener that accepts every
// connection and never answers, like a server that is stopped (SIGSTOP)
// or wedged: the kernel completes the handshake, nothing more happens. It
// reads and discards what clients send. The listener and its connections
// are closed when the test ends.
func HungAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // read what the client sends, answer nothing
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// ReadExactly reads len(want) bytes from c within timeout and fails the
// test (t.Fatal) unless they are want; c's read deadline is cleared
// after.
func ReadExactly(t testing.TB, c net.Conn, want string, timeout time.Duration) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	b := make([]byte, len(want))
	if _, err := io.ReadFull(c, b); err != nil || string(b) != want {
		t.Fatalf("read %q, %v; want %q", b, err, want)
	}
}

// TCPPair returns both ends of a loopback TCP connection, the dialled one
// and the accepted one, both closed when the test ends. It fails the test
// (t.Fatal) when either end cannot be had within timeout.
func TCPPair(t testing.TB, timeout time.Duration) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			ch <- c
		}
	}()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dialed.Close() })
	select {
	case accepted = <-ch:
	case <-time.After(timeout):
		t.Fatal("no accepted connection")
	}
	t.Cleanup(func() { _ = accepted.Close() })
	return dialed, accepted
}

// handedOut holds every port FreePort returned in this test process: the
// kernel may give a port it just released to the next bind to port 0, and
// a port handed out twice (say to a server's --listen and its
// --metrics-listen) makes one of the two fail to listen.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago and that
// no earlier call in this test process returned, for a server the test
// starts later (a child process, most often). It fails the test (t.Fatal)
// when it cannot find one.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("testnet.FreePort: 100 binds to port 0 gave only ports handed out before")
	return 0
}

// FreeAddr returns "127.0.0.1:port" for a port of FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
