package config

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseSpec checks that Parse never panics, that every error it returns
// is a non-empty *ValidationError, and that whatever it accepts is valid and
// survives a JSON round trip unchanged.
func FuzzParseSpec(f *testing.F) {
	f.Add(readFile(f, "testdata/example.yaml"))
	f.Add(readFile(f, "testdata/example.json"))
	for _, seed := range []string{
		"",
		"null",
		"{}",
		"[]",
		`{"upstreams": [], "services": [],}`,
		`{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"]}], "services": [{"name": "s", "upstream": "a"}]}`,
		`{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"]}], "services": [{"name": "s", "upstream": "a"}]} {}`,
		`{"services": [{"name": "s", "split": {"targets": [{"upstream": "a", "weight": "1"}, null]}}], "x": [[[{}]]]}`,
		"upstreams:\n  - name: a\n    endpoints: [h:1]\nservices:\n  - {name: s, upstream: a, host: EXAMPLE.com}\n",
		"upstreams: [\n",
		"a: 1\n---\nb: 2\n",
		"services:\n  - name: s\n    split:\n      targets: [{upstream: a}, {upstream: a, weight: 0}]\n      canary_analysis: {step: 9}\n",
		"{\"upstreams\": [{\"name\": \"a\", \"endpoints\": [\"[::1]:1\", \"http://[::1]:1/\"]}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty *ValidationError", err, err)
			}
			if s != nil {
				t.Fatalf("Parse returned both a spec and an error")
			}
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted a spec that Validate refuses: %v", err)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("marshal accepted spec: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if !reflect.DeepEqual(s, again) {
			t.Fatalf("round trip changed the spec:\n got %+v\nwant %+v", again, s)
		}
	})
}
