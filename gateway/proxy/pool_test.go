package proxy

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// acceptAll accepts connections on a loopback listener until the test ends
// and reports each accepted connection.
func acceptAll(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	return ln.Addr().String(), conns
}

func TestConnPoolReuseExpiryAndClose(t *testing.T) {
	t.Parallel()
	addr, accepted := acceptAll(t)
	p := newConnPool(addr)
	p.setTimeouts(time.Second, time.Second, time.Hour)
	ctx := context.Background()

	c1, reused, err := p.get(ctx)
	if err != nil || reused {
		t.Fatalf("first get: reused %t, %v; want a fresh connection", reused, err)
	}
	testrun.Recv(t, accepted, "the first connection")
	p.Put(c1)
	if n := p.idleCount(); n != 1 {
		t.Fatalf("%d idle after put, want 1", n)
	}
	c2, reused, err := p.get(ctx)
	if err != nil || !reused || c2 != c1 {
		t.Fatalf("second get: reused %t, same %t, %v; want the pooled connection", reused, c2 == c1, err)
	}

	// An idle connection past the idle timeout is not handed out again.
	p.setTimeouts(time.Second, time.Second, time.Nanosecond)
	p.Put(c2)
	c3, reused, err := p.get(ctx)
	if err != nil || reused || c3 == c2 {
		t.Fatalf("get after expiry: reused %t, %v; want a fresh connection", reused, err)
	}
	testrun.Recv(t, accepted, "the second connection")
	if _, err := c2.Net.Write([]byte("x")); err == nil {
		t.Error("the expired connection is still open")
	}

	// A closed pool keeps nothing.
	p.setTimeouts(time.Second, time.Second, time.Hour)
	p.close()
	p.Put(c3)
	if n := p.idleCount(); n != 0 {
		t.Errorf("%d idle in a closed pool, want 0", n)
	}
}

// TestConnPoolIdleHoldsNoBuffers: a connection carries its 64 KiB read
// and write buffers only while it carries a request; idle in its pool it
// holds none, and taken again it has both, empty.
func TestConnPoolIdleHoldsNoBuffers(t *testing.T) {
	t.Parallel()
	addr, accepted := acceptAll(t)
	p := newConnPool(addr)
	p.setTimeouts(time.Second, time.Second, time.Hour)
	c, _, err := p.get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	testrun.Recv(t, accepted, "the connection")
	if c.Reader == nil || c.Writer == nil || c.Reader.Size() != ConnBufferSize || c.Writer.Size() != ConnBufferSize {
		t.Fatalf("a new connection's buffers: %v, %v; want both of %d bytes", c.Reader, c.Writer, ConnBufferSize)
	}
	p.Put(c)
	if c.Reader != nil || c.Writer != nil {
		t.Fatal("an idle connection still holds its buffers")
	}
	again, reused, err := p.get(context.Background())
	if err != nil || !reused || again != c {
		t.Fatalf("get: reused %t, same %t, %v; want the idle connection", reused, again == c, err)
	}
	if c.Reader == nil || c.Writer == nil || c.Reader.Buffered() != 0 || c.Writer.Buffered() != 0 {
		t.Fatal("a connection taken from the pool has no buffers, or they hold bytes")
	}
}

func TestConnPoolConnectRefused(t *testing.T) {
	t.Parallel()
	p := newConnPool(testnet.ClosedAddr(t))
	p.setTimeouts(time.Second, time.Second, time.Hour)
	if _, _, err := p.get(context.Background()); err == nil {
		t.Fatal("get from a closed port succeeded")
	}
}

// TestCutStaysCut: a connection cut (its client gone) while its exchange
// is between two steps stays cut when the next step sets a read deadline
// of its own: the read it waits on returns at once instead of at that
// deadline (net/http front: a client that left right after its request
// was written used to leave the endpoint waiting for the response-header
// timeout).
func TestCutStaysCut(t *testing.T) {
	t.Parallel()
	nc, _ := testnet.TCPPair(t, conformanceDeadline)
	c := newUpConn(nc)
	c.CutNow()
	c.SetReadDeadline(time.Now().Add(time.Hour)) // the response-header timeout, say
	done := peekEnds(c)
	err := recvWithin(t, done, "the read on the cut connection")
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Fatalf("read on a cut connection: %v, want a timeout at once", err)
	}
}

// TestSetAnswerDeadline: the wait for an answer gets a read deadline no
// earlier than asked and at most its slack later; the next request's,
// asked a little later, leaves it on the socket; one beyond the slack, a
// cleared deadline, or one the idle look cleared, is set anew; and the
// deadline fires, not before the time asked.
func TestSetAnswerDeadline(t *testing.T) {
	t.Parallel()
	peer, nc := testnet.TCPPair(t, conformanceDeadline)
	c := newUpConn(nc)
	now := time.Now()
	c.SetAnswerDeadline(now, now.Add(time.Hour))
	first := c.rdl
	if want := now.Add(time.Hour).Add(maxDeadlineSlack).UnixNano(); first != want {
		t.Fatalf("the first answer deadline is %v, want the time asked plus the slack %v", time.Unix(0, first), time.Unix(0, want))
	}
	// A request a millisecond later asks for nearly the same: left as is.
	later := now.Add(time.Millisecond)
	c.SetAnswerDeadline(later, later.Add(time.Hour))
	if c.rdl != first {
		t.Fatalf("a deadline within the slack was moved: %v -> %v", time.Unix(0, first), time.Unix(0, c.rdl))
	}
	// Past the slack: set anew, never earlier than asked.
	later = now.Add(maxDeadlineSlack + time.Millisecond)
	c.SetAnswerDeadline(later, later.Add(time.Hour))
	if c.rdl == first || c.rdl < later.Add(time.Hour).UnixNano() {
		t.Fatalf("a deadline asked past the slack: %v (was %v)", time.Unix(0, c.rdl), time.Unix(0, first))
	}
	// Cleared: none on the socket, and none set again for a wait without one.
	c.SetAnswerDeadline(later, time.Time{})
	if c.rdl != 0 {
		t.Fatalf("a cleared answer deadline is still %v", time.Unix(0, c.rdl))
	}

	// It fires, not before the time asked (a short wait: a sixteenth of
	// it is the slack).
	now = time.Now()
	by := now.Add(100 * time.Millisecond)
	c.SetAnswerDeadline(now, by)
	done := peekEnds(c)
	err := recvWithin(t, done, "the read under the answer deadline")
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Fatalf("a read past the answer deadline: %v, want a timeout", err)
	}
	if time.Now().Before(by) {
		t.Fatal("the answer deadline fired before the time asked")
	}
	// The idle look clears the passed deadline (the connection is clean:
	// the peer sent nothing), and says so: the next wait sets its own.
	c.detach()
	if st := c.idleState(); st != idleClean || c.rdl != 0 {
		t.Fatalf("idle look after a passed deadline: state %v, deadline %v; want clean and none", st, c.rdl)
	}
	c.attach()
	now = time.Now()
	c.SetAnswerDeadline(now, now.Add(time.Hour))
	if _, err := peer.Write([]byte("H")); err != nil {
		t.Fatal(err)
	}
	if b, err := c.Reader.Peek(1); err != nil || string(b) != "H" {
		t.Fatalf("a read under a deadline set after the idle look: %q, %v", b, err)
	}
}

// peekEnds waits for the first byte of an answer on c in the background
// and brings what the wait ended with.
func peekEnds(c *Conn) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Reader.Peek(1)
		done <- err
	}()
	return done
}

// TestHeadRead: once an answer's header is read, its read deadline is
// lifted when more of the answer is to come from the socket (a body not
// yet all buffered, a chunked one, a tunnel after a 101), and left in
// place when nothing more is read for it (no body, or all of it
// buffered), for the next request to keep or move. Both fronts end the
// wait for an answer header with it.
func TestHeadRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answer  string
		upgrade bool
		lifted  bool
	}{
		{"whole body buffered", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, false},
		{"no body", "HTTP/1.1 204 No Content\r\n\r\n", false, false},
		{"body still to come", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", false, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", false, true},
		{"to the close", "HTTP/1.1 200 OK\r\n\r\nall of it", false, true},
		{"switched", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer, nc := testnet.TCPPair(t, conformanceDeadline)
			c := newUpConn(nc)
			if _, err := peer.Write([]byte(tc.answer)); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			c.SetAnswerDeadline(now, now.Add(time.Hour))
			set := c.rdl
			// The whole answer is on the socket before the head is read, so
			// a body that is all there is buffered by the head's read.
			if _, err := c.Reader.Peek(len(tc.answer)); err != nil {
				t.Fatal(err)
			}
			if err := c.ReadAnswer(nil, false, tc.upgrade); err != nil {
				t.Fatal(err)
			}
			c.HeadRead(tc.upgrade)
			if lifted := c.rdl == 0; lifted != tc.lifted {
				t.Fatalf("deadline after the head: %v (was %v), lifted %v, want lifted %v", time.Unix(0, c.rdl), time.Unix(0, set), lifted, tc.lifted)
			}
		})
	}
}
