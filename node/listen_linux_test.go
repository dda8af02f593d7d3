package node

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/internal/testrun"
)

// keepAliveOf dials s's listener and reads SO_KEEPALIVE of the connection
// it accepts.
func keepAliveOf(t *testing.T, s *server) int {
	t.Helper()
	defer s.ln.Close()
	dc, err := net.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	// A byte, for a listener that accepts once bytes have come.
	if _, err := dc.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	ac, err := s.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	rc, err := ac.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return v
}

// TestProxyListenerProbes: the proxy listener's connections come without
// TCP keep-alive probes (a tunnel turns them on: proxy.TunnelKeepAlive),
// an admin listener's with them.
func TestProxyListenerProbes(t *testing.T) {
	px, err := listenWith(proxyListen(time.Second), "proxy", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := keepAliveOf(t, px); v != 0 {
		t.Errorf("proxy listener: SO_KEEPALIVE %d; want 0", v)
	}
	admin, err := listen("admin", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := keepAliveOf(t, admin); v != 1 {
		t.Errorf("admin listener: SO_KEEPALIVE %d; want 1", v)
	}
}

// TestProxyListenerDefersAccept: the proxy listener hands a connection to
// accept only once its first bytes have come (TCP_DEFER_ACCEPT, set from
// the head timeout); an admin listener accepts at once.
func TestProxyListenerDefersAccept(t *testing.T) {
	px, err := listenWith(proxyListen(5*time.Second), "proxy", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer px.ln.Close()
	tl := px.ln.(*net.TCPListener)
	rc, err := tl.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if v <= 0 {
		t.Fatalf("TCP_DEFER_ACCEPT %d; want it set", v)
	}

	dc, err := net.Dial("tcp", px.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	// Silent: not accepted (the kernel holds it for seconds; a busy machine
	// can only make that later).
	_ = tl.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if c, err := tl.Accept(); !errors.Is(err, os.ErrDeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a connection that sent nothing: accept gave %v; want it held back", err)
	}
	if _, err := dc.Write([]byte("G")); err != nil {
		t.Fatal(err)
	}
	_ = tl.SetDeadline(time.Now().Add(testrun.Timeout))
	ac, err := tl.Accept()
	if err != nil {
		t.Fatalf("accept after the first byte: %v", err)
	}
	defer ac.Close()
	b := make([]byte, 1)
	if _, err := ac.Read(b); err != nil || b[0] != 'G' {
		t.Fatalf("read %q, %v; want the byte sent", b, err)
	}

	admin, err := listen("admin", "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.ln.Close()
	dc2, err := net.Dial("tcp", admin.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer dc2.Close()
	al := admin.ln.(*net.TCPListener)
	_ = al.SetDeadline(time.Now().Add(testrun.Timeout))
	c2, err := al.Accept()
	if err != nil {
		t.Fatalf("admin listener, a silent connection: %v; want it accepted", err)
	}
	c2.Close()
}
