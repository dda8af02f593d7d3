package testnet_test

import (
	"errors"
	"net"
	"strconv"
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

// TestFreePortNeverRepeats asks for many ports: each is free (a listener
// binds it) and none comes back twice, even though each is released before
// the next call.
func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 300 {
		p := testnet.FreePort(t)
		if seen[p] {
			t.Fatalf("FreePort returned %d twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d of FreePort is not free: %v", p, err)
		}
		ln.Close()
	}
}
