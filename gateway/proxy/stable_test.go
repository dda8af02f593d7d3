package proxy

import (
	"encoding/hex"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/split"
)

// stableGen is a spec whose service "api" is a stable split over the given
// targets (name, weight, ...), its table derived from parent's as the API
// derives it.
func stableGen(t *testing.T, parent *config.Spec, targets ...any) *config.Spec {
	t.Helper()
	s := &config.Spec{
		Upstreams: []config.Upstream{
			{Name: "blue", Endpoints: []string{"127.0.0.1:9001"}},
			{Name: "green", Endpoints: []string{"127.0.0.1:9002"}},
			{Name: "gray", Endpoints: []string{"127.0.0.1:9003"}},
		},
		Services: []config.Service{{Name: "api", BasePath: "/", Split: &config.Split{Allocation: config.AllocationStable}}},
	}
	for i := 0; i < len(targets); i += 2 {
		s.Services[0].Split.Targets = append(s.Services[0].Split.Targets,
			config.Target{Upstream: targets[i].(string), Weight: targets[i+1].(int)})
	}
	s.Defaults()
	config.Allocate(parent, s)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// picks returns the upstream each key goes to on p's service "api".
func picks(p *Proxy, keys []string) []string {
	svc := p.table.Load().hostless[0]
	sp := svc.split.Load()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = svc.targets[sp.PickHash(split.Hash(k))].Up.name
	}
	return out
}

// TestStableTableAcrossProxies: a proxy that applied every generation and
// one that applies only the last agree key for key, because the table is
// in the generation rather than derived by each proxy.
func TestStableTableAcrossProxies(t *testing.T) {
	t.Parallel()
	g1 := stableGen(t, nil, "blue", 50, "green", 50)
	g2 := stableGen(t, g1, "blue", 75, "green", 25)
	g3 := stableGen(t, g2, "gray", 20, "blue", 135, "green", 45)

	early := New(Options{Metrics: prometheus.NewRegistry()})
	defer early.Close()
	for i, g := range []*config.Spec{g1, g2, g3} {
		if err := early.Apply(g, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	late := New(Options{Metrics: prometheus.NewRegistry()})
	defer late.Close()
	if err := late.Apply(g3, 3); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(9, 9))
	keys := make([]string, 10000)
	var b [12]byte
	for i := range keys {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys[i] = hex.EncodeToString(b[:])
	}
	a, z := picks(early, keys), picks(late, keys)
	diff := 0
	for i := range keys {
		if a[i] != z[i] {
			diff++
		}
	}
	if diff != 0 {
		t.Errorf("%d of %d keys route differently on the two proxies", diff, len(keys))
	}
	if !early.table.Load().hostless[0].split.Load().Stable() {
		t.Error("the compiled split is not stable")
	}
	// Generation 3 compiled from scratch is not the fresh table: the keys
	// kept their generation-1 branches where the weights allowed.
	fresh := stableGen(t, nil, "gray", 20, "blue", 135, "green", 45)
	f := New(Options{Metrics: prometheus.NewRegistry()})
	defer f.Close()
	if err := f.Apply(fresh, 1); err != nil {
		t.Fatal(err)
	}
	same := 0
	for i, u := range picks(f, keys) {
		if u == a[i] {
			same++
		}
	}
	if same == len(keys) {
		t.Error("the derived table equals the fresh one; the test would not tell them apart")
	}
}
