package front

import (
	"errors"
	"io"
	"net"
	"testing"
)

// TestConnQueue: a connQueue hands delivered connections to Accept; once
// closed, Accept returns net.ErrClosed and deliver closes what it is
// handed.
func TestConnQueue(t *testing.T) {
	t.Parallel()
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443}
	q := newConnQueue(addr)
	if q.Addr() != addr {
		t.Errorf("Addr = %v, want %v", q.Addr(), addr)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	go q.deliver(c1)
	got, err := q.Accept()
	if err != nil || got != c1 {
		t.Fatalf("Accept = %v, %v; want the delivered connection", got, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := q.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
	}
	q.deliver(c1) // closes it
	if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the peer of a connection delivered after Close reads %v, want EOF", err)
	}
}
