package proxy

import (
	"reflect"
	"testing"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// changeField sets field i of the struct v points to to a value other
// than its own.
func changeField(t *testing.T, v reflect.Value, i int) {
	t.Helper()
	f := v.Elem().Field(i)
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "x")
	case reflect.Int:
		f.SetInt(f.Int() + 1)
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Slice:
		f.Set(reflect.Append(f, reflect.Zero(f.Type().Elem())))
	case reflect.Pointer:
		if f.IsNil() {
			f.Set(reflect.New(f.Type().Elem()))
		} else {
			f.Set(reflect.Zero(f.Type()))
		}
	default:
		t.Fatalf("field %s: kind %s not handled", v.Elem().Type().Field(i).Name, f.Kind())
	}
}

// TestCarryEqual checks that upstreamEqual and serviceEqual find a
// configuration equal to its copy and different from a copy with any
// one field changed, so a field added to config without them is not
// carried over unseen.
func TestCarryEqual(t *testing.T) {
	spec := spectest.New().
		Upstream("a", "127.0.0.1:9001", "127.0.0.1:9002").
		Upstream("b", "127.0.0.1:9101").
		Split("web", "/w", spectest.T("a", 95), spectest.T("b", 5)).Sticky("sid", 0).
		Parsed(t)
	u, s := spec.Upstreams[0], spec.Services[0]
	if cu := u.Clone(); !upstreamEqual(&u, &cu) {
		t.Error("an upstream differs from its copy")
	}
	if cs := cloneService(&s); !serviceEqual(cs, &s) {
		t.Error("a service differs from its copy")
	}
	for i := range reflect.TypeFor[config.Upstream]().NumField() {
		c := u.Clone()
		changeField(t, reflect.ValueOf(&c), i)
		if upstreamEqual(&u, &c) || upstreamEqual(&c, &u) {
			t.Errorf("upstream field %s changed, still equal", reflect.TypeFor[config.Upstream]().Field(i).Name)
		}
	}
	for i := range reflect.TypeFor[config.Service]().NumField() {
		c := cloneService(&s)
		changeField(t, reflect.ValueOf(c), i)
		if serviceEqual(&s, c) || serviceEqual(c, &s) {
			t.Errorf("service field %s changed, still equal", reflect.TypeFor[config.Service]().Field(i).Name)
		}
	}
	for i := range reflect.TypeFor[config.Split]().NumField() {
		c := cloneService(&s)
		changeField(t, reflect.ValueOf(c.Split), i)
		if serviceEqual(&s, c) || serviceEqual(c, &s) {
			t.Errorf("split field %s changed, still equal", reflect.TypeFor[config.Split]().Field(i).Name)
		}
	}
}

// TestApplyCarriesOver checks that a generation carries over the compiled
// upstreams and services whose configuration did not change, compiles the
// others anew, names its own generation in the X-Dwara-Generation of every
// target, and is not fooled by a spec changed in place after it was
// applied.
func TestApplyCarriesOver(t *testing.T) {
	build := func(weight int, bEndpoint string) *config.Spec {
		return spectest.New().
			Upstream("a", "127.0.0.1:9001", "127.0.0.1:9002").
			Upstream("b", bEndpoint).
			Upstream("c", "127.0.0.1:9201").
			Split("web", "/w", spectest.T("a", 100-weight), spectest.T("b", weight)).Sticky("sid", 0).
			Route("api", "/api", "c").
			Route("old", "/old", "b").
			Parsed(t)
	}
	p := New(Options{})
	defer p.Close()
	spec := build(5, "127.0.0.1:9101")
	if err := p.Apply(spec, 1); err != nil {
		t.Fatal(err)
	}
	t1 := p.Current()
	svc := func(tb *Table, path string) *service {
		s := tb.match("x.test", path)
		if s == nil {
			t.Fatalf("no service for %s", path)
		}
		return s
	}
	// The same configuration: everything carried over.
	if err := p.Apply(build(5, "127.0.0.1:9101"), 2); err != nil {
		t.Fatal(err)
	}
	t2 := p.Current()
	for _, name := range []string{"a", "b", "c"} {
		if t2.upstreams[name] != t1.upstreams[name] {
			t.Errorf("upstream %s compiled again, want carried over", name)
		}
	}
	for _, path := range []string{"/w", "/api", "/old"} {
		s1, s2 := svc(t1, path), svc(t2, path)
		if s1 == s2 || s1.targets[0] == s2.targets[0] {
			t.Errorf("%s: the service and its targets must be the generation's own", path)
		}
		if s2.split.Load() != s1.split.Load() || s2.rules != s1.rules || s2.targets[0].targetMetrics != s1.targets[0].targetMetrics {
			t.Errorf("%s: split, rules and metrics not carried over", path)
		}
		if g := s2.targets[0].HdrGeneration[0]; g != "2" {
			t.Errorf("%s: X-Dwara-Generation %q, want 2", path, g)
		}
		if g := s1.targets[0].HdrGeneration[0]; g != "1" {
			t.Errorf("%s: generation 1's X-Dwara-Generation became %q", path, g)
		}
	}
	// The spec of generation 2 changed in place (a weight) and applied
	// again: web is compiled anew with its new weights.
	spec3 := build(5, "127.0.0.1:9101")
	spec3.Services[0].Split.Targets[0].Weight, spec3.Services[0].Split.Targets[1].Weight = 50, 50
	if err := p.Apply(spec3, 3); err != nil {
		t.Fatal(err)
	}
	t3 := p.Current()
	if svc(t3, "/w").split.Load() == svc(t2, "/w").split.Load() {
		t.Error("web's weights changed, its split carried over")
	}
	if svc(t3, "/api").split.Load() != svc(t2, "/api").split.Load() {
		t.Error("api unchanged, not carried over")
	}
	spec3.Services[0].Split.Targets[0].Weight, spec3.Services[0].Split.Targets[1].Weight = 95, 5
	if err := p.Apply(build(50, "127.0.0.1:9101"), 4); err != nil {
		t.Fatal(err)
	}
	if svc(p.Current(), "/w").split.Load() != svc(t3, "/w").split.Load() {
		t.Error("web as generation 3 had it (its spec changed after apply), not carried over")
	}
	t4 := p.Current()
	// Upstream b's endpoint changes: b, and the services naming it (web
	// and old), are compiled anew; a and c and api are carried over.
	if err := p.Apply(build(50, "127.0.0.1:9102"), 5); err != nil {
		t.Fatal(err)
	}
	t5 := p.Current()
	if t5.upstreams["b"] == t4.upstreams["b"] || t5.upstreams["a"] != t4.upstreams["a"] {
		t.Error("only upstream b must be compiled anew")
	}
	if svc(t5, "/old").targets[0].Up != t5.upstreams["b"] || svc(t5, "/w").targets[1].Up != t5.upstreams["b"] {
		t.Error("a service naming b still routes to the old b")
	}
	if svc(t5, "/api").split.Load() != svc(t4, "/api").split.Load() {
		t.Error("api unchanged, not carried over")
	}
	if got := len(t5.upstreams["b"].endpoints[0].peers); got != 1 {
		t.Errorf("new endpoint of b has %d peers, want 1", got)
	}
	if p.reg.Len() != 4 {
		t.Errorf("registry holds %d addresses, want 4 (9101 forgotten)", p.reg.Len())
	}
	if _, ok := p.pools["b http 127.0.0.1:9101"]; ok {
		t.Error("the pool of b's old endpoint is still open")
	}
	if len(p.pools) != 4 {
		t.Errorf("%d pools, want 4", len(p.pools))
	}
	// After Close (which closed the pools) nothing is carried over.
	p.Close()
	if err := p.Apply(build(50, "127.0.0.1:9102"), 6); err != nil {
		t.Fatal(err)
	}
	if p.Current().upstreams["a"] == t5.upstreams["a"] {
		t.Error("upstream a carried over after Close")
	}
}

// TestApplyCarriesOverReordered checks that a generation whose spec lists
// the upstreams and services in another order, with one inserted and one
// removed, still carries over each that did not change (found by name
// when it is not at its place), and compiles anew the one at the place of
// another name.
func TestApplyCarriesOverReordered(t *testing.T) {
	p := New(Options{})
	defer p.Close()
	if err := p.Apply(spectest.New().
		Upstream("a", "127.0.0.1:9001").Upstream("b", "127.0.0.1:9101").Upstream("c", "127.0.0.1:9201").
		Route("one", "/1", "a").Route("two", "/2", "b").Route("three", "/3", "c").
		Parsed(t), 1); err != nil {
		t.Fatal(err)
	}
	t1 := p.Current()
	if err := p.Apply(spectest.New().
		Upstream("c", "127.0.0.1:9201").Upstream("new", "127.0.0.1:9301").Upstream("a", "127.0.0.1:9001").
		Route("three", "/3", "c").Route("four", "/4", "new").Route("one", "/1", "a").
		Parsed(t), 2); err != nil {
		t.Fatal(err)
	}
	t2 := p.Current()
	for _, name := range []string{"a", "c"} {
		if t2.upstreams[name] != t1.upstreams[name] {
			t.Errorf("upstream %s compiled again, want carried over", name)
		}
	}
	for _, path := range []string{"/1", "/3"} {
		s1, s2 := t1.match("x.test", path), t2.match("x.test", path)
		if s2 == nil || s2.split.Load() != s1.split.Load() || s2.targets[0].Up != s1.targets[0].Up {
			t.Errorf("%s: not carried over", path)
		}
	}
	if s := t2.match("x.test", "/4"); s == nil || s.targets[0].Up != t2.upstreams["new"] {
		t.Error("/4: not compiled to upstream new")
	}
	if t2.match("x.test", "/2") != nil {
		t.Error("/2: the service removed still matches")
	}
}
