// Package testnet gives tests network addresses that behave in a known
// way. It is for tests only.
package testnet

import (
	"net"
	"testing"
)

// ClosedAddr returns a loopback address ("127.0.0.1:port") where nothing
// listens: a port that was free a moment ago, so a connection to it is
// refused. It fails the test (t.Fatal) when it cannot find one.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
