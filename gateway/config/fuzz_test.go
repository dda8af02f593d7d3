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
		`{"upstreams": [{"name": "a", "endpoints": ["10.0.0.1:80"], "health_check": null, "passive": null}, {"name": "b", "endpoints": ["10.0.0.2:80"]}, {"name": "c", "endpoints": ["10.0.0.3:80"]}], "services": [{"name": "s", "base_path": "/", "upstream": null, "split": {"targets": [{"upstream": "a", "weight": null}, {"upstream": "b", "weight": 3}], "slots": null}, "mirror": {"upstream": "c", "percent": 5, "max_body_bytes": null}, "host": null, "sticky": {"cookie": "k"}}]}`,
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
		// Parse decoded the accepted document as it is: the same spec as
		// decoding what the structural check keeps of it.
		js, err := toJSON(data, FormatAuto)
		if err != nil {
			t.Fatal(err)
		}
		clean, probs, _, _ := checkStructure(js, true)
		cleaned, err := json.Marshal(clean)
		if len(probs) > 0 || err != nil {
			t.Fatalf("accepted document: problems %v, %v", probs, err)
		}
		var kept Spec
		if err := json.Unmarshal(cleaned, &kept); err != nil {
			t.Fatalf("decode %s: %v", cleaned, err)
		}
		kept.Defaults()
		if !reflect.DeepEqual(s, &kept) {
			t.Fatalf("decoded as sent:\n%+v\nwhat the check keeps:\n%+v", s, &kept)
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
