package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// socketPair returns both ends of a loopback TCP connection: the one made
// by dialing (a Socket set up on it, through a wrapper that only Unwraps,
// as the listener's connections are wrapped) and the accepted one.
func socketPair(t *testing.T) (c net.Conn, s *Socket, peer net.Conn) {
	t.Helper()
	dc, peer := tcpPair(t)
	c = &limitConn{Conn: dc, release: func() {}}
	s = new(Socket)
	s.Init(c)
	if s.rc == nil {
		t.Fatal("Init found no raw socket under the wrapper")
	}
	return c, s, peer
}

// readSlowly reads n bytes from c in 4 KiB steps (fewer when it fails
// first) and returns them.
func readSlowly(c net.Conn, n int) []byte {
	var all bytes.Buffer
	small := make([]byte, 4096)
	for all.Len() < n {
		m, err := c.Read(small)
		all.Write(small[:m])
		if err != nil {
			break
		}
	}
	return all.Bytes()
}

// TestSocketReadsAndWrites: a Socket reads what the peer wrote (waiting
// for it), writes all of a write larger than the socket buffers (waiting
// while the peer reads slowly), reads io.EOF when the peer closes, and
// fails as a net.Conn does: a deadline with os.ErrDeadlineExceeded, a
// closed connection with net.ErrClosed, a write to a reset connection with
// the system error.
func TestSocketReadsAndWrites(t *testing.T) {
	c, s, peer := socketPair(t)

	// A read waits for bytes written later.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = peer.Write([]byte("hello"))
	}()
	buf := make([]byte, 64)
	n, err := s.Read(c, buf)
	if err != nil || string(buf[:n]) != "hello" {
		t.Fatalf("read %q, %v; want hello", buf[:n], err)
	}
	if n, err := s.Read(c, nil); n != 0 || err != nil {
		t.Fatalf("empty read: %d, %v", n, err)
	}

	// A write of 8 MiB goes out whole, though the socket buffers take far
	// less at once: the peer reads it in small steps.
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	got := make(chan []byte, 1)
	go func() { got <- readSlowly(peer, len(big)) }()
	if n, err := s.Write(c, big); n != len(big) || err != nil {
		t.Fatalf("write: %d of %d, %v", n, len(big), err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer read %d bytes, not the %d written", len(b), len(big))
	}

	// A read deadline ends a wait as net.Conn's does.
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := s.Read(c, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	var ne net.Error
	if _, err := s.Read(c, buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline again: %v; want a timeout net.Error", err)
	}
	var oe *net.OpError
	if _, err := s.Read(c, buf); !errors.As(err, &oe) || oe.Op != "read" {
		t.Fatalf("read past the deadline: %v; want an OpError of op read", err)
	}
	_ = c.SetReadDeadline(time.Time{})

	// The peer closes: the rest, then io.EOF.
	_, _ = peer.Write([]byte("bye"))
	peer.Close()
	n, err = s.Read(c, buf)
	if err != nil || string(buf[:n]) != "bye" {
		t.Fatalf("read %q, %v; want bye", buf[:n], err)
	}
	if _, err := s.Read(c, buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v; want io.EOF", err)
	}

	// Writes to the closed peer end in a reset or a broken pipe, as the
	// system reports them.
	var werr error
	for until := time.Now().Add(testrun.Timeout); werr == nil && time.Now().Before(until); {
		_, werr = s.Write(c, []byte("more"))
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(werr, syscall.EPIPE) {
		t.Fatalf("write to a closed peer: %v; want ECONNRESET or EPIPE", werr)
	}

	// Closed here: net.ErrClosed.
	c.Close()
	if _, err := s.Read(c, buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed connection: %v; want net.ErrClosed", err)
	}
	if _, err := s.Write(c, buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed connection: %v; want net.ErrClosed", err)
	}
}

// TestSocketConcurrentReadWrite: one goroutine reads while another
// writes, as a tunnel does; both see every byte.
func TestSocketConcurrentReadWrite(t *testing.T) {
	c, s, peer := socketPair(t)
	const total = 4 << 20
	go func() { _, _ = io.Copy(peer, peer) }() // the peer echoes
	done := make(chan error, 1)
	go func() {
		chunk := bytes.Repeat([]byte{'x'}, 32<<10)
		for sent := 0; sent < total; sent += len(chunk) {
			if _, err := s.Write(c, chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 16<<10)
	read := 0
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for read < total {
		n, err := s.Read(c, buf)
		for _, b := range buf[:n] {
			if b != 'x' {
				t.Fatalf("byte %d is %q", read, b)
			}
		}
		read += n
		if err != nil {
			t.Fatalf("read after %d bytes: %v", read, err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestSocketWithoutRawSocket: a connection that is not TCP (a pipe)
// leaves the Socket going through the connection.
func TestSocketWithoutRawSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	var s Socket
	s.Init(a)
	go func() { _, _ = b.Write([]byte("pipe")) }()
	buf := make([]byte, 8)
	n, err := s.Read(a, buf)
	if err != nil || string(buf[:n]) != "pipe" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	// WriteAwait only writes there.
	go func() { _, _ = b.Read(buf) }()
	if n, err := s.WriteAwait(a, []byte("pipe")); n != 4 || err != nil {
		t.Fatalf("WriteAwait: %d, %v", n, err)
	}
}

// TestSocketWriteAwait: WriteAwait writes a request and returns only once
// its answer can be read (the read that follows finds it); a wait cut by
// the read deadline, or a deadline already past, still leaves the request
// written and no error, the read meeting the deadline instead; a request
// larger than the socket buffers goes out whole; a closed connection
// fails as Write does.
func TestSocketWriteAwait(t *testing.T) {
	c, s, peer := socketPair(t)
	buf := make([]byte, 64)

	// The peer reads the request, then answers later: WriteAwait returns
	// after the answer was sent, never before.
	var answered atomic.Bool
	go func() {
		b := make([]byte, 64)
		n, _ := peer.Read(b)
		if string(b[:n]) != "ping" {
			return
		}
		time.Sleep(20 * time.Millisecond)
		answered.Store(true)
		_, _ = peer.Write([]byte("pong"))
	}()
	_ = c.SetReadDeadline(time.Now().Add(testrun.Timeout))
	if n, err := s.WriteAwait(c, []byte("ping")); n != 4 || err != nil {
		t.Fatalf("WriteAwait: %d, %v", n, err)
	}
	if !answered.Load() {
		t.Fatal("WriteAwait returned before the answer was sent")
	}
	if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "pong" {
		t.Fatalf("read %q, %v; want pong", buf[:n], err)
	}

	// No answer within the deadline: the request is out, no error; the
	// read meets the deadline.
	got := make(chan string, 2)
	go func() {
		b := make([]byte, 64)
		for range 2 {
			n, _ := peer.Read(b)
			got <- string(b[:n])
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if n, err := s.WriteAwait(c, []byte("one")); n != 3 || err != nil {
		t.Fatalf("WriteAwait cut by the deadline: %d, %v; want 3, nil", n, err)
	}
	if r := recvWithin(t, got, "the first request"); r != "one" {
		t.Fatalf("peer read %q", r)
	}
	if _, err := s.Read(c, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the cut wait: %v; want os.ErrDeadlineExceeded", err)
	}
	// The deadline already past: written all the same.
	if n, err := s.WriteAwait(c, []byte("two")); n != 3 || err != nil {
		t.Fatalf("WriteAwait past the deadline: %d, %v; want 3, nil", n, err)
	}
	if r := recvWithin(t, got, "the second request"); r != "two" {
		t.Fatalf("peer read %q", r)
	}
	_ = c.SetReadDeadline(time.Time{})

	// 8 MiB, read slowly by the peer, then answered: all of it goes out.
	big := bytes.Repeat([]byte("0123456789abcdef"), 512<<10)
	whole := make(chan bool, 1)
	go func() {
		whole <- bytes.Equal(readSlowly(peer, len(big)), big)
		_, _ = peer.Write([]byte("ok"))
	}()
	if n, err := s.WriteAwait(c, big); n != len(big) || err != nil {
		t.Fatalf("WriteAwait of 8 MiB: %d, %v", n, err)
	}
	if !recvWithin(t, whole, "the peer's read of 8 MiB") {
		t.Fatal("the peer did not read the 8 MiB written")
	}
	if n, err := io.ReadFull(readerFunc(func(p []byte) (int, error) { return s.Read(c, p) }), buf[:2]); err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("read %q, %v; want ok", buf[:n], err)
	}

	c.Close()
	if _, err := s.WriteAwait(c, []byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteAwait on a closed connection: %v; want net.ErrClosed", err)
	}
}

// readerFunc is an io.Reader made of a function.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
