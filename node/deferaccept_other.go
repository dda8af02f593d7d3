//go:build !linux

package node

import (
	"syscall"
	"time"
)

// deferAccept is nil here: connections are accepted as they come (see
// deferaccept_linux.go).
func deferAccept(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
