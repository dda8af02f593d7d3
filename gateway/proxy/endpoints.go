package proxy

import (
	"slices"

	"github.com/dwara/dwara/api/apiv1"
)

// Endpoints returns the state of every endpoint of the generation being
// served: one entry per (upstream, endpoint), upstreams by name and each
// upstream's endpoints in spec order, with whether the endpoint is up and
// its requests in flight, read from the balance.State its balancer reads.
// An endpoint named by two upstreams appears under each. It returns an
// empty, non-nil slice before the first Apply.
//
// It reads one table, so the list is of one generation; the states are
// read one by one and may change meanwhile. It is safe for concurrent use,
// takes no lock that requests take and allocates the returned slice, so it
// is meant for reports (the gateway_instances heartbeat), not per request.
func (p *Proxy) Endpoints() []apiv1.EndpointState {
	t := p.table.Load()
	if t == nil {
		return []apiv1.EndpointState{}
	}
	names := make([]string, 0, len(t.upstreams))
	n := 0
	for name, u := range t.upstreams {
		names = append(names, name)
		n += len(u.endpoints)
	}
	slices.Sort(names)
	out := make([]apiv1.EndpointState, 0, n)
	for _, name := range names {
		for _, e := range t.upstreams[name].endpoints {
			out = append(out, apiv1.EndpointState{
				Upstream: name,
				Endpoint: e.Addr,
				Up:       e.state.Up(),
				InFlight: e.state.Inflight(),
			})
		}
	}
	return out
}
