package spectest

import (
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

func TestRenderingsAgree(t *testing.T) {
	t.Parallel()
	b := Canary(95, 5).Sticky("sid", 0).
		Upstream("api-next", "127.0.0.1:9201").Balancer("api-next", config.BalancerLeastConn).
		Route("web", "/", "api-next").Host("example.com")
	fromJSON, err := config.ParseAs(b.JSON(), config.FormatJSON)
	if err != nil {
		t.Fatalf("JSON does not parse: %v\n%s", err, b.JSON())
	}
	fromYAML, err := config.ParseAs([]byte(b.YAML()), config.FormatYAML)
	if err != nil {
		t.Fatalf("YAML does not parse: %v\n%s", err, b.YAML())
	}
	if !JSONEqual(t, mustJSON(t, fromJSON), mustJSON(t, fromYAML)) {
		t.Errorf("JSON and YAML renderings differ:\n%s\n%s", b.JSON(), b.YAML())
	}
	s := b.Parsed(t)
	api, _ := s.Service("api")
	if api == nil || api.Split.Targets[0].Weight != 95 || api.Split.Targets[1].Weight != 5 || api.Sticky.TTLSeconds != config.DefaultStickyTTLSeconds {
		t.Errorf("parsed api service = %+v", api)
	}
	if web, _ := s.Service("web"); web == nil || web.Host != "example.com" || web.Upstream != "api-next" {
		t.Errorf("parsed web service = %+v", web)
	}
}

func TestSpecIsACopy(t *testing.T) {
	t.Parallel()
	b := Canary(90, 10)
	s := b.Spec()
	s.Services[0].Split.Targets[0].Weight = 1
	if b.Spec().Services[0].Split.Targets[0].Weight != 90 {
		t.Error("changing the returned spec changed the builder")
	}
}

func TestJSONEqual(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want bool
	}{
		{`{"a": 1, "b": [1, 2]}`, `{"b":[1,2],"a":1}`, true},
		{`{"a": 1}`, `{"a": 1.0}`, false},
		{`{"a": [1, 2]}`, `{"a": [2, 1]}`, false},
		{`{"a": 1}`, `{"a": 1, "b": null}`, false},
	}
	for _, tt := range tests {
		if got := JSONEqual(t, []byte(tt.a), []byte(tt.b)); got != tt.want {
			t.Errorf("JSONEqual(%s, %s) = %t, want %t", tt.a, tt.b, got, tt.want)
		}
	}
}

func mustJSON(t *testing.T, s *config.Spec) []byte {
	t.Helper()
	b := New()
	b.s = *s.Clone()
	return b.JSON()
}
