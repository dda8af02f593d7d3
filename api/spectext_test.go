package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

// fullSpec is a valid spec that sets every string field of config.Spec at
// least once.
const fullSpec = `{
  "upstreams": [
    {"name": "a", "balancer": "least_conn", "endpoints": ["127.0.0.1:9001", "http://a.internal:80"],
     "health_check": {"path": "/healthz", "interval_s": 5, "timeout_s": 1, "healthy_threshold": 2, "unhealthy_threshold": 3,
                      "expected_status": {"min": 200, "max": 299}}},
    {"name": "b", "endpoints": ["127.0.0.1:9002"]}
  ],
  "services": [
    {"name": "one", "base_path": "/one", "host": "example.com", "upstream": "a",
     "mirror": {"upstream": "b", "percent": 10, "max_body_bytes": 1024},
     "cache": {"max_bytes": 1048576, "vary_headers": ["Accept-Language"]}},
    {"name": "two", "base_path": "/two",
     "split": {"targets": [{"upstream": "a", "weight": 90}, {"upstream": "b", "weight": 10}], "allocation": "hash",
               "match": [{"name": "beta", "headers": {"X-Group": {"exact": "beta"}, "X-Region": {"prefix": "eu-"}, "User-Agent": {"regex": "Mobile"}},
                          "cookies": {"plan": {"regex": "^pro"}, "tier": {"exact": "gold"}, "ab": {"prefix": "b"}}, "target": "b"}],
               "canary_analysis": {"enabled": true, "window_seconds": 60, "min_requests": 100, "cooldown_seconds": 60,
                                   "promote": {"metric": "error_rate", "threshold": 0.01},
                                   "gate": "final", "steps": [50, 100],
                                   "webhooks": [{"name": "chat", "type": "event", "url": "http://127.0.0.1:7000/events"}],
                                   "rollback": {"metric": "latency_p99", "threshold": 500}},
               "managed_by": "argo-rollouts"},
     "sticky": {"cookie": "dwara", "ttl_s": 60},
     "override": {"header": "X-Branch"}},
    {"name": "three", "base_path": "/three", "upstream": "a", "max_body_bytes": 4096,
     "models": [{"alias": "chat-prod", "affinity": "header:X-Session",
                 "targets": [{"upstream": "a", "model": "gpt-4o", "weight": 9}, {"upstream": "b", "model": "llama", "weight": 1}]}]}
  ]
}`

// notYetInSpecs are the string fields a valid spec cannot set yet:
// canary_analysis on a model alias is refused until the controller acts
// on it.
const notYetInSpecs = "Spec.Services.Models.CanaryAnalysis."

// TestValidationRefusesNUL checks what lets a publish store its encoded
// spec without looking at the bytes again (encodeSpec): the data plane's
// validation refuses a NUL character, which PostgreSQL cannot store, in
// every string of a spec. It fails when config.Spec gains a string field
// that fullSpec does not set, so a new field is checked too.
func TestValidationRefusesNUL(t *testing.T) {
	t.Parallel()
	spec, err := config.ParseAs([]byte(fullSpec), config.FormatJSON)
	if err != nil {
		t.Fatalf("fullSpec does not validate: %v", err)
	}
	fields := map[string]bool{} // every string field of the type: set in fullSpec?
	stringFields(reflect.TypeFor[config.Spec](), "Spec", fields)
	n := 0
	for field := range eachString(t, reflect.ValueOf(spec).Elem(), "Spec") {
		fields[field] = true
		n++
	}
	for field, set := range fields {
		if !set && !strings.HasPrefix(field, notYetInSpecs) {
			t.Errorf("fullSpec does not set %s; give it a value there", field)
		}
	}
	for i := range n {
		c := spec.Clone()
		var field, was string
		k := 0
		for f, v := range eachString(t, reflect.ValueOf(c).Elem(), "Spec") {
			if k == i {
				field, was = f, v.String()
				v.SetString(was + "\x00")
			}
			k++
		}
		if err := c.Validate(); err == nil {
			t.Errorf("%s = %q: validates", field, was+"\x00")
		}
	}
}

// stringFields adds to fields the path of every string (or string
// element) field reachable from type t, named by types and field names.
func stringFields(t reflect.Type, path string, fields map[string]bool) {
	switch t.Kind() {
	case reflect.String:
		fields[path] = false
	case reflect.Pointer, reflect.Slice, reflect.Array:
		stringFields(t.Elem(), path, fields)
	case reflect.Map:
		stringFields(t.Key(), path+".key", fields)
		stringFields(t.Elem(), path, fields)
	case reflect.Struct:
		for f := range t.Fields() {
			if f.IsExported() {
				stringFields(f.Type, path+"."+f.Name, fields)
			}
		}
	}
}

// eachString yields every string in v, settable, with its field path as
// stringFields names it.
func eachString(t *testing.T, v reflect.Value, path string) func(yield func(string, reflect.Value) bool) {
	return func(yield func(string, reflect.Value) bool) {
		var walk func(v reflect.Value, path string) bool
		walk = func(v reflect.Value, path string) bool {
			switch v.Kind() {
			case reflect.String:
				return yield(path, v)
			case reflect.Pointer:
				return v.IsNil() || walk(v.Elem(), path)
			case reflect.Slice, reflect.Array:
				for i := range v.Len() {
					if !walk(v.Index(i), path) {
						return false
					}
				}
			case reflect.Struct:
				for i := range v.NumField() {
					if f := v.Type().Field(i); f.IsExported() && !walk(v.Field(i), path+"."+f.Name) {
						return false
					}
				}
			case reflect.Map:
				// A map's keys and values are not settable: each is
				// walked in a copy that is put back, under its new key.
				keys := v.MapKeys()
				slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
				for _, k := range keys {
					key := reflect.New(k.Type()).Elem()
					key.Set(k)
					elem := reflect.New(v.Type().Elem()).Elem()
					elem.Set(v.MapIndex(k))
					ok := yield(path+".key", key) && walk(elem, path)
					v.SetMapIndex(k, reflect.Value{})
					v.SetMapIndex(key, elem)
					if !ok {
						return false
					}
				}
			case reflect.Bool, reflect.Int, reflect.Float64:
			default:
				t.Fatalf("%s: a %s, which this test does not walk", path, v.Kind())
			}
			return true
		}
		walk(v, path)
	}
}
