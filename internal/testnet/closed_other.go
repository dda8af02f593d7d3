//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package testnet

import (
	"net"
	"testing"
)

// closedPort returns a loopback port that was free a moment ago (where
// sockets cannot be bound without listening, another listener may take
// it before the test is over).
func closedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
