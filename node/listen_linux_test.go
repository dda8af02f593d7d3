package node

import (
	"net"
	"syscall"
	"testing"
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
	px, err := listenWith(proxyListen, "proxy", "127.0.0.1:0", nil)
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
