// Package balance picks an endpoint of one upstream for each request.
//
// The proxy compiles every generation into one Balancer per upstream, built
// with New over the endpoints in spec order, and calls Pick on every request.
// Pick is the hot path: every balancer is safe for concurrent use, takes no
// lock and allocates nothing.
//
// What a balancer knows about an endpoint lives in a State, handed out by a
// Registry keyed by the endpoint address. States are shared by every
// generation that names the endpoint, so in-flight counts, latency estimates
// and health survive configuration swaps; the Registry forgets an address
// only when Retain is told that no applied generation names it any more.
//
// Every balancer passes over endpoints that are down and returns -1 when none
// is up. An endpoint is down while the active health checks hold it down
// (SetUp(false), from gateway/health) or the passive checks have ejected it
// (Eject, from the proxy).
//
// Four algorithms are provided, one file each:
//
//   - round_robin (roundrobin.go): rotate over the endpoints that are up.
//   - least_conn (leastconn.go): fewest requests in flight, ties rotated.
//   - ip_hash (iphash.go): a ketama consistent-hash ring keyed by the
//     affinity key, so one client or session keeps one endpoint.
//   - peak_ewma (peakewma.go): power of two random choices weighted by a
//     peak-sensitive latency average times the requests in flight.
package balance

import (
	"errors"
	"fmt"

	"github.com/dwara/dwara/gateway/config"
)

// Balancer picks an endpoint for a request. Implementations are safe for
// concurrent use and allocate nothing per Pick.
type Balancer interface {
	// Pick returns the index, in the endpoint slice the balancer was built
	// over, of the endpoint that should serve the request, or -1 when no
	// endpoint is up. key is the affinity key (the sticky cookie value,
	// else the client IP); only ip_hash uses it, and "" is a valid key.
	Pick(key string) int
}

// ErrUnknownBalancer is returned by New for a kind that is not one of
// round_robin, least_conn, ip_hash, peak_ewma or "".
var ErrUnknownBalancer = errors.New("unknown balancer")

// New builds a balancer of the named kind over the endpoints of one upstream.
// kind is one of the config.Balancer* names; "" means round_robin. addrs and
// states are parallel, in spec order: states[i] is the State of addrs[i]
// (usually from Registry.Get), and the index Pick returns refers to both.
// ip_hash places its ring points by address, so the same address lands on
// the same ring positions in every generation.
//
// New copies both slices. It fails with ErrUnknownBalancer for an unknown
// kind, and when there are no endpoints, when the slices differ in length or
// when a state is nil.
func New(kind string, addrs []string, states []*State) (Balancer, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("new %q balancer: no endpoints", kind)
	}
	if len(addrs) != len(states) {
		return nil, fmt.Errorf("new %q balancer: %d addresses but %d states", kind, len(addrs), len(states))
	}
	for i, s := range states {
		if s == nil {
			return nil, fmt.Errorf("new %q balancer: nil state for endpoint %d (%s)", kind, i, addrs[i])
		}
	}
	states = append([]*State(nil), states...)
	switch kind {
	case "", config.BalancerRoundRobin:
		return newRoundRobin(states), nil
	case config.BalancerLeastConn:
		return newLeastConn(states), nil
	case config.BalancerIPHash:
		return newRing(addrs, states), nil
	case config.BalancerPeakEWMA:
		return newPeakEWMA(states), nil
	default:
		return nil, fmt.Errorf("new %q balancer: %w", kind, ErrUnknownBalancer)
	}
}

// cacheLinePad separates a counter written on every pick from the read-only
// fields next to it, so writers do not invalidate the readers' cache line.
type cacheLinePad [64]byte
