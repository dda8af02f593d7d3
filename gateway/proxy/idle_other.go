//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package proxy

import "net"

// peeker is a no-op where sockets cannot be peeked at: an idle connection
// is checked only for buffered bytes, and a closed one is found when a
// request is written to it.
type peeker struct{}

func (k *peeker) init(net.Conn) {}

func (k *peeker) state(net.Conn) (idleState, bool) { return idleClean, false }
