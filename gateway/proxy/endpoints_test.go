package proxy

import (
	"slices"
	"sync"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

func TestEndpointsListsStates(t *testing.T) {
	t.Parallel()
	p := New(Options{})
	t.Cleanup(p.Close)
	if got := p.Endpoints(); got == nil || len(got) != 0 {
		t.Fatalf("Endpoints before the first Apply = %#v, want an empty non-nil slice", got)
	}

	// Nothing is dialled on Apply: the addresses need not answer.
	spec, err := config.Parse([]byte(`
upstreams:
  - name: web-stable
    endpoints: ["127.0.0.1:9402", "127.0.0.1:9401"]
  - name: api
    balancer: least_conn
    endpoints: ["127.0.0.1:9403", "127.0.0.1:9401"]
services:
  - name: web
    base_path: /
    upstream: web-stable
  - name: api
    base_path: /api
    upstream: api
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(spec, 1); err != nil {
		t.Fatal(err)
	}
	p.Registry().Get("127.0.0.1:9402").SetUp(false)
	shared := p.Registry().Get("127.0.0.1:9401")
	start := shared.Begin()
	start2 := shared.Begin()
	got := p.Endpoints()
	shared.Done(start, false)
	shared.Done(start2, false)

	// Upstreams by name, endpoints in spec order; 9401 is one state under
	// both upstreams.
	want := []apiv1.EndpointState{
		{Upstream: "api", Endpoint: "127.0.0.1:9403", Up: true},
		{Upstream: "api", Endpoint: "127.0.0.1:9401", Up: true, InFlight: 2},
		{Upstream: "web-stable", Endpoint: "127.0.0.1:9402", Up: false},
		{Upstream: "web-stable", Endpoint: "127.0.0.1:9401", Up: true, InFlight: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Endpoints =\n%+v\nwant\n%+v", got, want)
	}
	if got := p.Endpoints(); got[1].InFlight != 0 || got[3].InFlight != 0 {
		t.Errorf("in flight after Done = %+v, want 0", got)
	}
}

func TestEndpointsConcurrentWithApply(t *testing.T) {
	t.Parallel()
	// Endpoints reads whichever table is served while Apply swaps them
	// (under -race): every list is one whole generation's.
	p := New(Options{})
	t.Cleanup(p.Close)
	specs := make([]*config.Spec, 2)
	for i, eps := range []string{`["127.0.0.1:9501"]`, `["127.0.0.1:9502", "127.0.0.1:9503"]`} {
		s, err := config.Parse([]byte(`{"upstreams": [{"name": "u", "endpoints": ` + eps + `}],
			"services": [{"name": "s", "base_path": "/", "upstream": "u"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		specs[i] = s
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for gen := range int64(200) {
			if err := p.Apply(specs[gen%2], gen+1); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range 2000 {
		var addrs []string
		for _, e := range p.Endpoints() {
			addrs = append(addrs, e.Endpoint)
		}
		switch {
		case len(addrs) == 0,
			slices.Equal(addrs, []string{"127.0.0.1:9501"}),
			slices.Equal(addrs, []string{"127.0.0.1:9502", "127.0.0.1:9503"}):
		default:
			t.Fatalf("Endpoints lists %v, want one generation's endpoints", addrs)
		}
	}
	wg.Wait()
}
