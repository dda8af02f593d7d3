package config

import (
	"strings"
	"testing"
)

func TestValidateCache(t *testing.T) {
	t.Parallel()
	const c = "services[0].cache"
	tests := []struct {
		name  string
		cache Cache
		want  []problem
	}{
		{name: "valid", cache: Cache{MaxBytes: 64 << 20, MaxObjectBytes: 1 << 20, DefaultTTLSeconds: 60, VaryHeaders: []string{"Accept-Language"}}},
		{name: "object bound left to its default", cache: Cache{MaxBytes: 1 << 20}},
		{name: "no max_bytes", cache: Cache{},
			want: []problem{{c + ".max_bytes", "is required: the memory bound of the service's cache in bytes, 1048576..68719476736", ""}}},
		{name: "max_bytes too small", cache: Cache{MaxBytes: 1000},
			want: []problem{{c + ".max_bytes", "must be 1048576..68719476736, got 1000", ""}}},
		{name: "object above the cache", cache: Cache{MaxBytes: 2 << 20, MaxObjectBytes: 3 << 20},
			want: []problem{{c + ".max_object_bytes", "must be 1..2097152, got 3145728", ""}}},
		{name: "object above its bound", cache: Cache{MaxBytes: 1 << 30, MaxObjectBytes: 65 << 20},
			want: []problem{{c + ".max_object_bytes", "must be 1..67108864", ""}}},
		{name: "negative object", cache: Cache{MaxBytes: 1 << 30, MaxObjectBytes: -1},
			want: []problem{{c + ".max_object_bytes", "must be 1..", ""}}},
		{name: "ttl", cache: Cache{MaxBytes: 1 << 20, DefaultTTLSeconds: -1},
			want: []problem{{c + ".default_ttl_s", "must be 0..31536000, got -1", ""}}},
		{name: "vary header not a token", cache: Cache{MaxBytes: 1 << 20, VaryHeaders: []string{"Accept Language"}},
			want: []problem{{c + ".vary_headers[0]", `must be an HTTP field name (a token of at most 64 characters), got "Accept Language"`, ""}}},
		{name: "vary header the gateway sets", cache: Cache{MaxBytes: 1 << 20, VaryHeaders: []string{"X-Forwarded-For"}},
			want: []problem{{c + ".vary_headers[0]", `"X-Forwarded-For" is a field the gateway sets`, ""}}},
		{name: "vary header twice", cache: Cache{MaxBytes: 1 << 20, VaryHeaders: []string{"Accept", "accept"}},
			want: []problem{{c + ".vary_headers[1]", `"accept" is named twice`, ""}}},
		{name: "too many vary headers", cache: Cache{MaxBytes: 1 << 20, VaryHeaders: strings.Split("a,b,c,d,e,f,g,h,i", ",")},
			want: []problem{{c + ".vary_headers", "at most 8 field names, got 9", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := validSpec()
			cc := tt.cache
			s.Services[0].Cache = &cc
			checkProblems(t, s.Validate(), tt.want...)
		})
	}
}

func TestParseCacheUnknownField(t *testing.T) {
	t.Parallel()
	doc := `{"upstreams":[{"name":"a","endpoints":["127.0.0.1:1"]}],
	"services":[{"name":"s","upstream":"a","cache":{"max_bytes":1048576,"max_age":5}}]}`
	_, err := Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "services[0].cache.max_age") {
		t.Fatalf("Parse = %v, want an error naming services[0].cache.max_age", err)
	}
}

func TestCloneCache(t *testing.T) {
	t.Parallel()
	s := validSpec()
	s.Services[0].Cache = &Cache{MaxBytes: 1 << 20, VaryHeaders: []string{"Accept"}}
	c := s.Clone()
	c.Services[0].Cache.VaryHeaders[0] = "X"
	c.Services[0].Cache.MaxBytes = 5
	if s.Services[0].Cache.VaryHeaders[0] != "Accept" || s.Services[0].Cache.MaxBytes != 1<<20 {
		t.Fatalf("Clone shares the cache: %+v", s.Services[0].Cache)
	}
}
