package h2server

import (
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/dwara/dwara/internal/testrun"
	"golang.org/x/net/http2"
)

type gate struct {
	mu      sync.Mutex
	shut    bool
	open    chan struct{} // closed when the gate opens again
	blocked chan struct{} // a write is held (one signal per held write)
}

func newGate() *gate {
	return &gate{open: make(chan struct{}), blocked: make(chan struct{}, 64)}
}

func (g *gate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	if g.shut {
		g.shut = false
		close(g.open)
	}
	g.mu.Unlock()
}

// gatedConn is a connection whose writes block, once the gate is shut,
// until it opens again: a client that reads nothing, without the socket
// buffers a real one fills first.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.g.mu.Lock()
	shut, open := c.g.shut, c.g.open
	c.g.mu.Unlock()
	if shut {
		c.g.blocked <- struct{}{}
		<-open
	}
	return c.Conn.Write(p)
}

// startGated serves, until the test ends, on a new listener of 127.0.0.1
// whose connections' writes g holds, a handler that answers /mark with
// 204 after a signal on reached, and any other path with 1,000 bytes,
// flushed. It returns a raw client connected to it whose stream 1 (GET
// /big) has had its answer's write held: the gate is shut.
func startGated(t *testing.T, g *gate, reached chan<- struct{}) *rawClient {
	t.Helper()
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mark" {
			reached <- struct{}{}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = w.Write(pattern(1000, 1))
		_ = http.NewResponseController(w).Flush() // held by the gate
	})}
	addr := serveOn(t, srv, func(nc net.Conn) net.Conn { return &gatedConn{Conn: nc, g: g} })
	t.Cleanup(g.release) // before serveOn's: a held write must not keep Serve from returning
	rc := (&testServer{addr: addr}).dialRaw(t)
	rc.handshake()
	g.close()
	rc.request(1, http.MethodGet, "/big", true)
	testrun.Recv(t, g.blocked, "a write held at the gate")
	return rc
}

// TestReaderNotHeldByStuckWriter checks that the goroutine reading a
// connection's frames goes on while a stream's answer cannot be written
// (the client reads nothing): the PING it must acknowledge is left for
// the writer, and the next request still reaches its handler. Before,
// the reader waited for the write lock to acknowledge the PING, and so
// read nothing more until the write failed (here: never), though the
// client, which may itself wait to send, was not reading because of that.
func TestReaderNotHeldByStuckWriter(t *testing.T) {
	t.Parallel()
	g := newGate()
	t.Cleanup(g.release)
	reached := make(chan struct{}, 1)
	rc := startGated(t, g, reached)
	ping := [8]byte{'s', 't', 'u', 'c', 'k'}
	if err := rc.fr.WritePing(false, ping); err != nil {
		t.Fatal(err)
	}
	rc.request(3, http.MethodGet, "/mark", true)
	testrun.Recv(t, reached, "the handler of the request sent after the PING, while a write is held")

	g.release()
	var acked, marked bool
	rc.until("the PING's ACK and stream 3's answer", func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.PingFrame:
			acked = acked || (f.IsAck() && f.Data == ping)
		case *http2.MetaHeadersFrame:
			marked = marked || (f.StreamID == 3 && fieldValue(f, ":status") == "204")
		}
		return acked && marked
	})
}

// TestControlFlood checks the bound on control frames kept for a writer
// that cannot write: a client that sends PINGs and reads nothing has its
// connection closed once more than maxQueuedControl wait, instead of the
// server keeping each.
func TestControlFlood(t *testing.T) {
	t.Parallel()
	g := newGate()
	t.Cleanup(g.release)
	rc := startGated(t, g, nil)
	var werr error
	for i := range 4 * maxQueuedControl {
		if werr = rc.fr.WritePing(false, [8]byte{byte(i), byte(i >> 8)}); werr != nil {
			break
		}
	}
	g.release()
	// The server closed the connection: whatever it wrote before, the
	// client's reads end (it never answers the PINGs past the bound).
	acks := 0
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			break
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			acks++
		}
	}
	if acks > maxQueuedControl {
		t.Errorf("%d PINGs acknowledged after %d were sent behind a held write; want at most %d (the rest close the connection)",
			acks, 4*maxQueuedControl, maxQueuedControl)
	}
	_ = werr // a write may fail once the server has closed
}
