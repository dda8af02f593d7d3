package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// socketPair returns both ends of a loopback TCP connection: the one made
// by dialing (a Socket set up on it, through a wrapper that only Unwraps,
// as the listener's connections are wrapped) and the accepted one.
func socketPair(t *testing.T) (c net.Conn, s *Socket, peer net.Conn) {
	t.Helper()
	dc, peer := testnet.TCPPair(t, conformanceDeadline)
	c = slotConn(dc)
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
	testrun.Eventually(t, "a write to the closed peer failing", func() bool {
		_, werr = s.Write(c, []byte("more"))
		return werr != nil
	})
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

// TestSocketHold: held bytes are not written by Hold but by whatever the
// connection does next: a Read (before it waits: the peer gets them
// without sending anything first), a Write (before its own bytes), a
// Flush. A read whose deadline has passed leaves them held; a socket
// buffer that takes only part of them has the rest written before the
// read; a close from another goroutine during the wait that follows
// comes after they are out; a write to a reset connection fails the Read.
func TestSocketHold(t *testing.T) {
	c, s, peer := socketPair(t)
	s.HoldIn(make([]byte, 1024))
	buf := make([]byte, 64)
	peerGot := func(want string) {
		t.Helper()
		testnet.ReadExactly(t, peer, want, testrun.Timeout)
	}
	peerGets := func(within time.Duration) string {
		_ = peer.SetReadDeadline(time.Now().Add(within))
		b := make([]byte, 64)
		n, _ := peer.Read(b)
		_ = peer.SetReadDeadline(time.Time{})
		return string(b[:n])
	}

	if s.Hold(make([]byte, 1025)) {
		t.Fatal("Hold took more than its buffer")
	}
	if !s.Hold([]byte("answer1")) {
		t.Fatal("Hold refused 7 bytes")
	}
	if s.Hold([]byte("more")) {
		t.Fatal("Hold took bytes while others were held")
	}
	if got := peerGets(50 * time.Millisecond); got != "" {
		t.Fatalf("Hold wrote %q at once", got)
	}
	// The Read writes them, then waits for the peer's next request.
	go func() {
		b := make([]byte, 7)
		if _, err := io.ReadFull(peer, b); err == nil && string(b) == "answer1" {
			_, _ = peer.Write([]byte("request2"))
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(testrun.Timeout))
	if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "request2" {
		t.Fatalf("Read after Hold: %q, %v; want request2 (the peer answers only once it has the held bytes)", buf[:n], err)
	}

	// A Write sends the held bytes first.
	s.Hold([]byte("a2"))
	if _, err := s.Write(c, []byte("+b2")); err != nil {
		t.Fatal(err)
	}
	peerGot("a2+b2")
	// Flush.
	s.Hold([]byte("a3"))
	if err := s.Flush(c); err != nil {
		t.Fatal(err)
	}
	peerGot("a3")
	if err := s.Flush(c); err != nil {
		t.Fatalf("Flush with nothing held: %v", err)
	}

	// A read deadline already past: the read fails before writing, the
	// bytes stay held for the Flush.
	s.Hold([]byte("a4"))
	_ = c.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := s.Read(c, buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	if got := peerGets(50 * time.Millisecond); got != "" {
		t.Fatalf("a read that failed at once wrote %q", got)
	}
	if err := s.Flush(c); err != nil {
		t.Fatal(err)
	}
	peerGot("a4")

	// A full socket buffer: the peer reads nothing until the socket has
	// refused a write, then all of it; the held bytes follow what was
	// written before them, whole, and the read after them gets the
	// peer's answer.
	filler := bytes.Repeat([]byte("f"), 64<<10)
	held := bytes.Repeat([]byte("a5"), 512)
	// Small buffers, so that the socket refuses even a small write once
	// full.
	_ = c.(*limitConn).Conn.(*net.TCPConn).SetWriteBuffer(4096)
	_ = peer.(*net.TCPConn).SetReadBuffer(4096)
	sent := 0
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	for {
		n, err := s.Write(c, filler)
		sent += n
		if err != nil {
			break
		}
	}
	_ = c.SetWriteDeadline(time.Time{})
	if sent == 0 {
		t.Fatal("nothing written before the socket buffer was full")
	}
	go func() {
		// Late enough, mostly, for the held write to meet the full buffer.
		time.Sleep(20 * time.Millisecond)
		all := readSlowly(peer, sent+len(held))
		if len(all) == sent+len(held) && bytes.Equal(all[sent:], held) {
			_, _ = peer.Write([]byte("request6"))
		}
	}()
	s.Hold(held)
	_ = c.SetReadDeadline(time.Now().Add(testrun.Timeout))
	if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "request6" {
		t.Fatalf("Read after Hold on a full socket: %q, %v; want request6", buf[:n], err)
	}

	// A close during the wait: the held bytes are out before it.
	s.Hold([]byte("a7"))
	readErr := make(chan error, 1)
	go func() {
		_, err := s.Read(c, buf)
		readErr <- err
	}()
	peerGot("a7")
	c.Close()
	if err := recvWithin(t, readErr, "the read cut by the close"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read cut by a close: %v; want net.ErrClosed", err)
	}

	// Held bytes for a reset connection: the Read fails with the write's
	// error.
	c2, s2, peer2 := socketPair(t)
	s2.HoldIn(make([]byte, 16))
	peer2.(*net.TCPConn).SetLinger(0)
	peer2.Close()
	_ = c2.SetReadDeadline(time.Now().Add(testrun.Timeout))
	testrun.Eventually(t, "a held write to a reset connection failing its read", func() bool {
		s2.Hold([]byte("x"))
		_, err := s2.Read(c2, buf)
		return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	})
}

// threadWrites is the number of write system calls the calling thread
// has made (task I/O accounting); the caller has locked its goroutine to
// the thread.
func threadWrites(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/io")
	if err != nil {
		t.Fatalf("task I/O accounting: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("syscw %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatalf("no syscw in /proc/thread-self/io:\n%s", b)
	return 0
}

// TestSocketWriteJoinsHeld: a Write after held bytes makes one write
// call for both when it fits after them in the buffer (the bytes arrive
// in order), and two when it does not.
func TestSocketWriteJoinsHeld(t *testing.T) {
	c, s, peer := socketPair(t)
	s.HoldIn(make([]byte, 64))
	peerGot := func(want string) {
		t.Helper()
		testnet.ReadExactly(t, peer, want, testrun.Timeout)
	}
	// The raw calls are made on the goroutine's own thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, tc := range []struct {
		held, write string
		calls       int
	}{
		{"head", "+body", 1},
		{strings.Repeat("h", 40), strings.Repeat("b", 24), 1}, // exactly the buffer
		{strings.Repeat("h", 40), strings.Repeat("b", 25), 2},
	} {
		if !s.Hold([]byte(tc.held)) {
			t.Fatalf("Hold refused %d bytes", len(tc.held))
		}
		before := threadWrites(t)
		if n, err := s.Write(c, []byte(tc.write)); err != nil || n != len(tc.write) {
			t.Fatalf("Write after %d held bytes: %d, %v", len(tc.held), n, err)
		}
		if calls := threadWrites(t) - before; calls != tc.calls {
			t.Errorf("%d bytes held, %d written: %d write calls, want %d", len(tc.held), len(tc.write), calls, tc.calls)
		}
		peerGot(tc.held + tc.write)
	}
}

// TestSocketReadAfterHeldFindsWaitingBytes: bytes the peer sent before a
// Read with bytes held (a pipelined request, an HTTP/2 frame) are read by
// it, after the held bytes went out: the Read does not wait for more. The
// pause lets the poller take the socket's readiness before the Read, as
// it does when the bytes come while the connection is busy.
func TestSocketReadAfterHeldFindsWaitingBytes(t *testing.T) {
	c, s, peer := socketPair(t)
	s.HoldIn(make([]byte, 64))
	buf := make([]byte, 64)
	for i := range 3 {
		if _, err := peer.Write([]byte("request")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if !s.Hold([]byte("answer")) {
			t.Fatal("Hold refused 6 bytes")
		}
		_ = c.SetReadDeadline(time.Now().Add(testrun.Timeout))
		if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "request" {
			t.Fatalf("round %d: Read with bytes held and a request waiting: %q, %v; want %q", i, buf[:n], err, "request")
		}
		testnet.ReadExactly(t, peer, "answer", testrun.Timeout)
	}
}

// TestSocketInitAllocations: setting a Socket up on a client connection
// makes three allocations (the RawConn and its read and write calls);
// the wait for an answer and the read after held bytes, which only some
// connections use, are made on first use, and then work. Not parallel:
// AllocsPerRun.
func TestSocketInitAllocations(t *testing.T) {
	c, _, peer := socketPair(t)
	s := new(Socket)
	allocs := testing.AllocsPerRun(100, func() {
		*s = Socket{}
		s.Init(c)
	})
	if allocs > 3 {
		t.Errorf("Init makes %v allocations; want at most 3", allocs)
	}
	if s.await != nil || s.afterHeld != nil {
		t.Fatal("Init made the calls of WriteAwait and of a read after held bytes")
	}
	// The first WriteAwait makes its call and waits for the answer.
	go func() {
		buf := make([]byte, 3)
		if _, err := io.ReadFull(peer, buf); err == nil {
			_, _ = peer.Write([]byte("answer"))
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(conformanceDeadline))
	if n, err := s.WriteAwait(c, []byte("req")); n != 3 || err != nil {
		t.Fatalf("WriteAwait: %d, %v", n, err)
	}
	buf := make([]byte, 16)
	if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "answer" {
		t.Fatalf("read %q, %v after WriteAwait", buf[:n], err)
	}
	// HoldIn makes the read after held bytes, which writes them first.
	s.HoldIn(make([]byte, 64))
	if !s.Hold([]byte("held")) {
		t.Fatal("Hold kept nothing")
	}
	go func() {
		got := make([]byte, 4)
		if _, err := io.ReadFull(peer, got); err == nil && string(got) == "held" {
			_, _ = peer.Write([]byte("next"))
		}
	}()
	if n, err := s.Read(c, buf); err != nil || string(buf[:n]) != "next" {
		t.Fatalf("read %q, %v after held bytes", buf[:n], err)
	}
}
