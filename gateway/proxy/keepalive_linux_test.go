package proxy

import (
	"net"
	"syscall"
	"testing"
)

// sockopt reads an integer option of c's socket.
func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestTunnelProbesItsClient: a connection accepted without TCP keep-alive
// probes (as the proxy listener accepts them) has them on, with
// TunnelKeepAlive's timing, once it is a tunnel's client side, found
// under the wrappers the fronts put around it.
func TestTunnelProbesItsClient(t *testing.T) {
	ln, err := (&net.ListenConfig{KeepAlive: -1}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ac, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if v := sockopt(t, ac, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); v != 0 {
		t.Fatalf("accepted with SO_KEEPALIVE %d; the test needs a connection without probes", v)
	}
	probeIdle(slotConn(ac))
	if v := sockopt(t, ac, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); v != 1 {
		t.Fatalf("SO_KEEPALIVE %d after probeIdle; want 1", v)
	}
	if v := sockopt(t, ac, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE); v != int(TunnelKeepAlive.Idle.Seconds()) {
		t.Fatalf("TCP_KEEPIDLE %d; want %v", v, TunnelKeepAlive.Idle)
	}
	if v := sockopt(t, ac, syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT); v != TunnelKeepAlive.Count {
		t.Fatalf("TCP_KEEPCNT %d; want %d", v, TunnelKeepAlive.Count)
	}
}
