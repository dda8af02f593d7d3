package proxy

import (
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

// specFields lists the leaf fields of the spec type t by their JSON path
// (a list's elements as []), below prefix.
func specFields(t reflect.Type, prefix string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Slice && derefKind(t.Elem()) == reflect.Struct:
		return specFields(t.Elem(), prefix+"[]")
	case t.Kind() != reflect.Struct:
		return []string{prefix}
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		out = append(out, specFields(f.Type, path)...)
	}
	return out
}

func derefKind(t reflect.Type) reflect.Kind {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind()
}

// TestFastPathRulesDeclareEveryField: every field of the spec is declared
// in fastPathRules, and nothing else is: a new field that changes what
// happens to a request must say what a front's fast path does with it.
func TestFastPathRulesDeclareEveryField(t *testing.T) {
	t.Parallel()
	fields := specFields(reflect.TypeFor[config.Spec](), "")
	if len(fields) < 30 {
		t.Fatalf("found %d spec fields, want the whole spec: %v", len(fields), fields)
	}
	declared := map[string]bool{}
	for _, r := range fastPathRules {
		if declared[r.field] {
			t.Errorf("%s is declared twice", r.field)
		}
		declared[r.field] = true
	}
	for _, f := range fields {
		if !declared[f] {
			t.Errorf("spec field %s is not declared in fastPathRules: say whether a front's fast path does what it asks", f)
		}
	}
	for f := range declared {
		if !slices.Contains(fields, f) {
			t.Errorf("fastPathRules declares %s, which the spec does not have", f)
		}
	}
}

// TestFastPathDecidedAtCompile: a service takes the fast path unless a
// declared field keeps it off (a mirror, an https endpoint, one named by
// DNS, on any of its targets' upstreams), or the proxy keeps an access
// log.
func TestFastPathDecidedAtCompile(t *testing.T) {
	t.Parallel()
	const ups = `upstreams:
  - {name: ip, endpoints: ["127.0.0.1:9001", "http://127.0.0.1:9002"]}
  - {name: tls, endpoints: ["https://127.0.0.1:9443"]}
  - {name: dns, endpoints: ["localhost:9001"]}
  - {name: shadow, endpoints: ["127.0.0.1:9501"]}
services:
  - {name: plain, base_path: /plain, upstream: ip, sticky: {cookie: sid}, override: {header: X-Branch}}
  - {name: split, base_path: /split, split: {targets: [{upstream: ip, weight: 9}, {upstream: tls, weight: 1}]}}
  - {name: dns, base_path: /dns, upstream: dns}
  - {name: mirrored, base_path: /mirrored, upstream: ip, mirror: {upstream: shadow, percent: 10}}
`
	want := map[string]bool{"plain": true, "split": false, "dns": false, "mirrored": false}
	for _, access := range []bool{false, true} {
		o := Options{}
		if access {
			o.AccessLog = slog.New(slog.NewTextHandler(io.Discard, nil))
		}
		p := New(o)
		defer p.Close()
		if err := p.Apply(mustParse(t, ups), 1); err != nil {
			t.Fatal(err)
		}
		tbl := p.table.Load()
		for name, fast := range want {
			svc := tbl.match("", "/"+name)
			if svc == nil || svc.name != name {
				t.Fatalf("no service %s", name)
			}
			if svc.fastPath != (fast && !access) {
				t.Errorf("access log %v: %s.fastPath = %v, want %v", access, name, svc.fastPath, fast && !access)
			}
		}
	}
}
