// Package spectest builds generation specs for tests, in Go, and compares
// JSON documents. It is the one place tests of every package get a spec
// from: a Builder renders the same spec as a *config.Spec, JSON or YAML, so
// a test of the API, the CLI, the proxy or a source says what it needs
// ("a 95/5 canary split", "a split over these pools") instead of spelling
// out a document.
//
// It is meant for tests only; nothing in the product imports it.
package spectest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
)

// The endpoints of Canary's upstreams. Nothing listens there: tests that
// send traffic build their own upstreams from running pools.
var (
	StableEndpoints = []string{"127.0.0.1:9001", "127.0.0.1:9002"}
	CanaryEndpoints = []string{"127.0.0.1:9101"}
)

// Builder assembles a spec step by step. Each method changes the builder
// and returns it, so calls chain; Sticky, Host and the other service
// settings apply to the service added last. The zero value is not usable:
// start with New, Canary or Split. A Builder is not safe for concurrent use.
//
// Builders do not validate: Spec returns exactly what was built, so a test
// can build an invalid spec on purpose. Parse what it renders (JSON, YAML)
// to get a validated, defaulted spec.
type Builder struct {
	s config.Spec
}

// New returns an empty Builder.
func New() *Builder { return &Builder{} }

// T is a split target.
func T(upstream string, weight int) config.Target {
	return config.Target{Upstream: upstream, Weight: weight}
}

// Canary returns the common test spec: upstreams api-stable
// (StableEndpoints) and api-canary (CanaryEndpoints), and service "api" on
// base path /v1 split between them by the two weights.
func Canary(stable, canary int) *Builder {
	return New().
		Upstream("api-stable", StableEndpoints...).
		Upstream("api-canary", CanaryEndpoints...).
		Split("api", "/v1", T("api-stable", stable), T("api-canary", canary))
}

// SplitOver returns a spec with one upstream per pool (named after it) and
// service "web" on "/" split over them by weights, one per pool, in order.
func SplitOver(pools []*demo.Pool, weights ...int) *Builder {
	if len(weights) != len(pools) {
		panic(fmt.Sprintf("spectest: %d weights for %d pools", len(weights), len(pools)))
	}
	b := New()
	targets := make([]config.Target, len(pools))
	for i, p := range pools {
		b.Upstream(p.Name, p.Addrs...)
		targets[i] = T(p.Name, weights[i])
	}
	return b.Split("web", "/", targets...)
}

// Upstream adds an upstream with the default balancer.
func (b *Builder) Upstream(name string, endpoints ...string) *Builder {
	b.s.Upstreams = append(b.s.Upstreams, config.Upstream{Name: name, Endpoints: endpoints})
	return b
}

// Balancer sets the balancer of upstream name, which must have been added.
func (b *Builder) Balancer(name, balancer string) *Builder {
	u, _ := b.s.Upstream(name)
	if u == nil {
		panic("spectest: Balancer of unknown upstream " + name)
	}
	u.Balancer = balancer
	return b
}

// Split adds a service on basePath split over targets.
func (b *Builder) Split(service, basePath string, targets ...config.Target) *Builder {
	b.s.Services = append(b.s.Services, config.Service{Name: service, BasePath: basePath,
		Split: &config.Split{Targets: targets}})
	return b
}

// Route adds a service on basePath routed to one upstream.
func (b *Builder) Route(service, basePath, upstream string) *Builder {
	b.s.Services = append(b.s.Services, config.Service{Name: service, BasePath: basePath, Upstream: upstream})
	return b
}

// Sticky pins sessions of the last service added with cookie (ttl 0: the
// default).
func (b *Builder) Sticky(cookie string, ttlSeconds int) *Builder {
	b.last().Sticky = &config.Sticky{Cookie: cookie, TTLSeconds: ttlSeconds}
	return b
}

// Host sets the Host match of the last service added.
func (b *Builder) Host(host string) *Builder {
	b.last().Host = host
	return b
}

// Edit applies f to the spec being built, for anything the other methods
// do not cover (including deliberately invalid specs).
func (b *Builder) Edit(f func(*config.Spec)) *Builder {
	f(&b.s)
	return b
}

func (b *Builder) last() *config.Service {
	if len(b.s.Services) == 0 {
		panic("spectest: no service added yet")
	}
	return &b.s.Services[len(b.s.Services)-1]
}

// Spec returns a copy of the spec as built (neither defaulted nor
// validated).
func (b *Builder) Spec() *config.Spec { return b.s.Clone() }

// Parsed returns the spec as the decoder reads it (defaulted and
// validated), failing t when it does not validate.
func (b *Builder) Parsed(t testing.TB) *config.Spec {
	t.Helper()
	s, err := config.ParseAs(b.JSON(), config.FormatJSON)
	if err != nil {
		t.Fatalf("spectest: the built spec does not parse: %v", err)
	}
	return s
}

// JSON renders the spec as JSON.
func (b *Builder) JSON() json.RawMessage {
	js, err := json.Marshal(&b.s)
	if err != nil {
		panic("spectest: encode spec: " + err.Error()) // the config types always encode
	}
	return js
}

// MarshalJSON renders the spec, so a Builder can stand in a request body
// (map[string]any{"spec": b}).
func (b *Builder) MarshalJSON() ([]byte, error) { return b.JSON(), nil }

// YAML renders the spec as YAML.
func (b *Builder) YAML() string {
	y, err := yaml.JSONToYAML(b.JSON())
	if err != nil {
		panic("spectest: encode spec as YAML: " + err.Error())
	}
	return string(y)
}

// JSONEqual reports whether a and b hold the same JSON value, ignoring key
// order and white space; invalid JSON on either side fails t.
func JSONEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	for _, x := range []struct {
		data []byte
		v    *any
	}{{a, &va}, {b, &vb}} {
		dec := json.NewDecoder(bytes.NewReader(x.data))
		dec.UseNumber()
		if err := dec.Decode(x.v); err != nil {
			t.Fatalf("spectest: decode %s: %v", x.data, err)
		}
	}
	return reflect.DeepEqual(va, vb)
}

// Analysis sets the canary analysis of the last service added, which must
// be a split.
func (b *Builder) Analysis(ca config.CanaryAnalysis) *Builder {
	s := b.last()
	if s.Split == nil {
		panic("spectest: Analysis of a service without a split")
	}
	s.Split.CanaryAnalysis = &ca
	return b
}
