package proxy

import (
	"net"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// TestLimitListener: with a cap of 2, a third connection is not accepted
// until one of the first two closes; Close unblocks a waiting Accept.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := LimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	acceptDone := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptDone <- err
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String()) // the kernel queues the third
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first := testrun.Recv(t, accepted, "first connection")
	testrun.Recv(t, accepted, "second connection")
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two are open")
	case <-time.After(100 * time.Millisecond): // a bounded look for something that must not happen
	}
	first.Close()
	first.Close() // a second Close gives no second slot
	third := testrun.Recv(t, accepted, "third connection, after one closed")
	defer third.Close()
	// Both slots are taken again: Close must unblock the waiting Accept.
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := testrun.Recv(t, acceptDone, "Accept returning after Close"); err == nil {
		t.Fatal("Accept returned no error after Close")
	}
}

// slotConn wraps c as a LimitListener's connection does, holding one
// slot of a listener of its own, which its Close gives back.
func slotConn(c net.Conn) *limitConn {
	l := &limitListener{sem: make(chan struct{}, 1)}
	l.sem <- struct{}{}
	return &limitConn{Conn: c, l: l}
}
