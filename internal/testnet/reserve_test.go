package testnet

import (
	"runtime"
	"testing"
)

// TestFreePortReservedAndBelowEphemeral checks that a port of FreePort
// lies below the ephemeral ports, where the machine's connections take
// no source port, and that it is reserved against every other taker: a
// second bind of its abstract socket (as another test process would
// make) is refused.
func TestFreePortReservedAndBelowEphemeral(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ip_local_port_range and abstract Unix sockets are Linux's")
	}
	lo, hi := portsBelowEphemeral()
	if hi <= lo {
		t.Skip("no room below the ephemeral ports on this machine")
	}
	for range 20 {
		p := FreePort(t)
		if p < lo || p >= hi {
			t.Fatalf("FreePort returned %d; want one in [%d, %d), below the ephemeral ports", p, lo, hi)
		}
		if reserve(p) {
			t.Fatalf("port %d of FreePort could be reserved again; want it held", p)
		}
	}
}
