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
