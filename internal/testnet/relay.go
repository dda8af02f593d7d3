package testnet

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Relay is a loopback TCP relay to a target address that a test can cut
// and restore: a database that goes away and comes back, with the server
// itself untouched. Safe for concurrent use.
type Relay struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{} // both sides of every relayed connection
}

// NewRelay starts a relay to target on 127.0.0.1 and returns it; it is
// closed, with its connections, when the test ends.
func NewRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		r.Cut()
	})
	return r
}

// Addr is the relay's address ("127.0.0.1:port").
func (r *Relay) Addr() string { return r.ln.Addr().String() }

// Cut closes every relayed connection at once (the server's side sees its
// client go, the client's sees a reset or an end of stream) and closes
// each connection accepted from then on until Restore.
func (r *Relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = true
	for c := range r.conns {
		_ = c.Close()
	}
	clear(r.conns)
}

// Restore relays new connections again.
func (r *Relay) Restore() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut = false
}

// serve relays the client connection c to the target until either side
// ends or the relay is cut.
func (r *Relay) serve(c net.Conn) {
	if !r.track(c) {
		_ = c.Close()
		return
	}
	up, err := net.Dial("tcp", r.target)
	if err != nil || !r.track(up) {
		_ = c.Close()
		if up != nil {
			_ = up.Close()
		}
		return
	}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		_ = dst.Close()
		_ = src.Close()
	}
	wg.Add(2)
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

// track adds c to the relayed connections, or reports false while cut.
func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cut {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}
