package fastfront

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// firstHeadPair is a FirstHeadConn on the accepted end of a loopback TCP
// connection, and the dialled end.
func firstHeadPair(t *testing.T) (*FirstHeadConn, net.Conn) {
	t.Helper()
	peer, c := testnet.TCPPair(t, testrun.Timeout)
	fc := NewFirstHeadConn(c)
	t.Cleanup(func() { _ = fc.Close() })
	return fc, peer
}

// TestFirstHeadConnJoinsWrites: a write after JoinNextWrite is held and
// goes out with the next one, in order; one that nothing follows goes
// out alone within joinWait; a write that meets bytes held goes out with
// them and leaves the join for a later one; a write too large is not
// held; a close writes what is held before closing.
func TestFirstHeadConnJoinsWrites(t *testing.T) {
	t.Parallel()
	fc, peer := firstHeadPair(t)
	peerGot := func(want string) {
		t.Helper()
		testnet.ReadExactly(t, peer, want, testrun.Timeout)
	}
	write := func(s string) {
		t.Helper()
		if n, err := fc.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q): %d, %v", s, n, err)
		}
	}

	fc.wait = time.Hour // the timer must not write what the checks look at
	fc.JoinNextWrite()
	write("HEADERS")
	if n := fc.sock.HeldLen(); n != len("HEADERS") {
		t.Fatalf("after a joined write %d bytes are held, want %d", n, len("HEADERS"))
	}
	write("DATA")
	if n := fc.sock.HeldLen(); n != 0 {
		t.Fatalf("the write after a joined one left %d bytes held", n)
	}
	peerGot("HEADERSDATA")

	// Nothing follows: the timer writes it (the peer's deadline is the
	// suite's generous one, not joinWait).
	fc.wait = time.Millisecond
	fc.JoinNextWrite()
	write("alone")
	peerGot("alone")
	fc.wait = time.Hour

	// Two joins asked before the writes: the first write is held, the
	// second goes out with it and leaves the other join for the third,
	// which the fourth writes.
	fc.JoinNextWrite()
	fc.JoinNextWrite()
	write("a")
	write("b")
	if n := fc.sock.HeldLen(); n != 0 {
		t.Fatalf("the write after a held one left %d bytes held", n)
	}
	peerGot("ab")
	if n := fc.joins.Load(); n != 1 {
		t.Fatalf("%d joins left after a held write and one joined to it, want 1", n)
	}
	write("c")
	if n := fc.sock.HeldLen(); n != 1 {
		t.Fatalf("the third write: %d bytes held, want 1", n)
	}
	write("d")
	peerGot("cd")

	// A write too large to hold goes out at once.
	fc.JoinNextWrite()
	big := make([]byte, holdSize+1)
	for i := range big {
		big[i] = 'x'
	}
	write(string(big))
	peerGot(string(big))

	// Close writes what is held first.
	fc.JoinNextWrite()
	write("last")
	_ = fc.Close()
	_ = peer.SetReadDeadline(time.Now().Add(testrun.Timeout))
	rest, err := io.ReadAll(peer)
	if err != nil || string(rest) != "last" {
		t.Fatalf("after Close the peer read %q, %v; want %q then EOF", rest, err, "last")
	}
}

// TestFirstHeadConnReadsAhead: a first read of one byte (fasthttp's on a
// new connection) takes what the socket has, up to aheadSize, in one
// read, and the reads after it get the rest in order, then the socket's
// own; the buffer goes once drained. A first read of more is a plain
// read.
func TestFirstHeadConnReadsAhead(t *testing.T) {
	t.Parallel()
	head := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	big := strings.Repeat("0123456789abcdef", (aheadSize+1000)/16) // past aheadSize
	for _, sent := range []string{head, big} {
		fc, peer := firstHeadPair(t)
		if _, err := peer.Write([]byte(sent)); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, fc.Conn, len(sent))
		b := make([]byte, 1)
		if n, err := fc.Read(b); n != 1 || err != nil || b[0] != sent[0] {
			t.Fatalf("first read: %d %q %v; want %q", n, b[:n], err, sent[:1])
		}
		took := min(len(sent), aheadSize)
		if fc.ahead == nil || fc.aheadN-fc.aheadAt != took-1 {
			t.Fatalf("%d bytes sent: the first read kept %d ahead; want %d", len(sent), fc.aheadN-fc.aheadAt, took-1)
		}
		testnet.ReadExactly(t, fc, sent[1:], testrun.Timeout)
		if fc.ahead != nil {
			t.Error("the read-ahead buffer is still held once drained")
		}
	}

	fc, peer := firstHeadPair(t)
	if _, err := peer.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	testnet.ReadExactly(t, fc, head, testrun.Timeout)
	if fc.ahead != nil {
		t.Error("a first read of more than a byte kept a read-ahead buffer")
	}
}

// waitQueued waits (bounded) until c's socket holds n bytes to read.
func waitQueued(t *testing.T, c net.Conn, n int) {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	testrun.Eventually(t, "the bytes sent queued on the socket", func() bool {
		var got int
		_ = rc.Control(func(fd uintptr) {
			got, _, _ = syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		})
		return got >= n
	})
}

// TestClientIPKeptPerConnection: the client's address is formatted by a
// connection's first request and kept for the later ones (the same bytes,
// nothing formatted again), through TLS too; a connection that is no
// FirstHeadConn gets it formatted each time into the buffer given.
func TestClientIPKeptPerConnection(t *testing.T) {
	t.Parallel()
	fc, _ := firstHeadPair(t)
	var buf [64]byte
	first := clientIP(fc, buf[:0])
	if string(first) != "127.0.0.1" {
		t.Fatalf("client address %q, want 127.0.0.1", first)
	}
	if fc.peerN == 0 || &first[0] != &fc.peer[0] {
		t.Fatal("the client address is not kept with the connection")
	}
	clear(buf[:])
	again := clientIP(tls.Server(fc, &tls.Config{}), buf[:0])
	if &again[0] != &fc.peer[0] || string(again) != "127.0.0.1" {
		t.Fatalf("a later request (under TLS) got %q, not the connection's kept address", again)
	}
	_, plain := testnet.TCPPair(t, testrun.Timeout)
	if ip := clientIP(plain, buf[:0]); string(ip) != "127.0.0.1" || &ip[0] != &buf[0] {
		t.Fatalf("a plain connection's address: %q (in the buffer given: %v)", ip, len(ip) > 0 && &ip[0] == &buf[0])
	}
}
