//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testnet

import (
	"fmt"
	"syscall"
	"testing"
)

// closedPort binds a TCP socket to a free loopback port without listening
// on it, keeps it until the test ends, and returns the address: a connect
// to it is refused, and nothing else can bind the port meanwhile.
func closedPort(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd) // SOCK_CLOEXEC is not every Unix's
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
