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
	done := make(chan error, 1)
	go func() {
		_, err := c.Reader.Peek(1)
		done <- err
	}()
	err := recvWithin(t, done, "the read on the cut connection")
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Fatalf("read on a cut connection: %v, want a timeout at once", err)
	}
}
