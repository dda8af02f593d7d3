package testnet_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/dwara/dwara/internal/testnet"
)

func TestClosedAddrRefuses(t *testing.T) {
	t.Parallel()
	addr := testnet.ClosedAddr(t)
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		conn.Close()
		t.Fatalf("dial %s succeeded, want connection refused", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
}

// TestClosedAddrStaysClosed: a connection to ClosedAddr is refused, and no
// listener can take its port while the test runs.
func TestClosedAddrStaysClosed(t *testing.T) {
	addr := testnet.ClosedAddr(t)
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("dial %s: connected, want refused", addr)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("listen on %s: it was free, want it held", addr)
	}
}
