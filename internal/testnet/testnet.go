// Package testnet gives tests network addresses that behave in a known
// way. It is for tests only.
package testnet

import (
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
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

// FreePort returns a port on 127.0.0.1 that was free a moment ago, that
// no earlier call in this test process returned and that no other test
// process holds (reserve), for a server the test starts later (a child
// process, most often). It fails the test (t.Fatal) when it cannot find
// one.
//
// The port is below the kernel's range of ephemeral ports when there is
// room (portsBelowEphemeral): a port of a bind to port 0 lies in that
// range, from which every process on the machine also takes the source
// ports of its connections, so on a busy machine (another suite beside
// this one) a connection could take it between this check and the
// child's bind, seconds later.
func FreePort(t testing.TB) int {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	lo, hi := portsBelowEphemeral()
	for range 200 {
		port := 0 // the kernel's choice, when there is no room below
		if hi > lo {
			port = lo + rand.IntN(hi-lo)
		}
		if port != 0 && (handedOut.ports[port] || !reserve(port)) {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port == 0 {
				t.Fatal(err)
			}
			continue // in use by something else
		}
		port = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("testnet.FreePort: no free port in 200 tries")
	return 0
}

// portsBelowEphemeral is the range [lo, hi) FreePort takes ports from:
// from 20000 up to the first ephemeral port (ip_local_port_range), or an
// empty range when that is not known or leaves less than 1,000 ports.
// It is read once per test process.
var portsBelowEphemeral = sync.OnceValues(readPortsBelowEphemeral)

func readPortsBelowEphemeral() (lo, hi int) {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(data))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first-20000 < 1000 {
		return 0, 0
	}
	return 20000, first
}

// FreeAddr returns "127.0.0.1:port" for a port of FreePort.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// WrapListener is a listener whose accepted connections Wrap wraps (to
// count, hold or mark what a server does with them).
type WrapListener struct {
	net.Listener
	Wrap func(net.Conn) net.Conn
}

// Accept accepts a connection of the listener and returns it wrapped.
func (l WrapListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.Wrap(c), nil
}
