package testnet

import (
	"net"
	"strconv"
	"sync"
)

// reserved keeps the sockets of the ports this process reserved open
// until it exits.
var reserved struct {
	sync.Mutex
	lns []net.Listener
}

// reserve takes port for this test process against the other test
// processes on the machine (go test runs packages in processes of their
// own, and a second suite may run beside): a Unix socket in the abstract
// namespace named for the port, which no other process can bind while
// this one lives and which goes with it, leaving nothing behind. It
// reports false when another process holds it.
func reserve(port int) bool {
	ln, err := net.Listen("unix", "@dwara-test-port-"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	reserved.Lock()
	reserved.lns = append(reserved.lns, ln)
	reserved.Unlock()
	return true
}
