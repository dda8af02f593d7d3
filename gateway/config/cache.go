package config

import (
	"fmt"
	"slices"
	"strings"
)

// Cache is a service's response cache (DESIGN.md section 11): a shared
// cache per RFC 9111 in the gateway's memory, keyed by the branch the
// pick chose, so that an answer of one branch is never served to a
// session of another.
type Cache struct {
	// MaxBytes bounds the memory the service's cached answers take (their
	// heads and bodies), MinCacheBytes..MaxCacheBytes; required.
	MaxBytes int `json:"max_bytes"`
	// MaxObjectBytes bounds one answer's body: a longer one is served but
	// not stored. 0 means DefaultCacheObjectBytes (or MaxBytes when that
	// is smaller); at most MaxBytes and MaxCacheObjectBytes.
	MaxObjectBytes int `json:"max_object_bytes"`
	// DefaultTTLSeconds is the freshness of an answer cacheable by default
	// (RFC 9111 section 4.2.2: a 200, 301, 404 and the other heuristically
	// cacheable codes) that carries no freshness of its own (no max-age,
	// s-maxage or Expires); 0 (the default) stores none such.
	// 0..MaxCacheTTLSeconds.
	DefaultTTLSeconds int `json:"default_ttl_s"`
	// VaryHeaders are request fields that always take part in the key, as
	// if every answer of the service named them in Vary (e.g.
	// Accept-Language when the endpoints forget to say so). At most
	// MaxCacheVaryHeaders field names, each once.
	VaryHeaders []string `json:"vary_headers,omitempty"`
}

// The bounds of a cache.
const (
	MinCacheBytes           = 1 << 20
	MaxCacheBytes           = 64 << 30
	DefaultCacheObjectBytes = 1 << 20
	MaxCacheObjectBytes     = 64 << 20
	MaxCacheTTLSeconds      = 365 * 24 * 3600
	MaxCacheVaryHeaders     = 8
)

// ObjectBytes is c's max_object_bytes with its default applied.
func (c *Cache) ObjectBytes() int {
	if c.MaxObjectBytes > 0 {
		return c.MaxObjectBytes
	}
	return min(DefaultCacheObjectBytes, c.MaxBytes)
}

// unvaryable are request fields vary_headers may not name: the sticky
// cookie already chooses the branch, which is in the key, and the rest are
// the gateway's or the connection's.
var unvaryable = []string{"host", "connection", "content-length", "transfer-encoding", "te", "trailer",
	"upgrade", "keep-alive", "proxy-connection", "x-request-id", "x-forwarded-for", "x-forwarded-host",
	"x-forwarded-proto", "x-dwara-service", "x-dwara-upstream", "x-dwara-generation"}

// cache checks a service's cache.
func (v *validator) cache(c *Cache, path string) {
	if c.MaxBytes == 0 {
		v.probs.add(member(path, "max_bytes"), "is required: the memory bound of the service's cache in bytes, %d..%d", MinCacheBytes, MaxCacheBytes)
	} else {
		v.between(member(path, "max_bytes"), c.MaxBytes, MinCacheBytes, MaxCacheBytes)
	}
	if c.MaxObjectBytes != 0 {
		hi := MaxCacheObjectBytes
		if c.MaxBytes >= MinCacheBytes {
			hi = min(hi, c.MaxBytes)
		}
		v.between(member(path, "max_object_bytes"), c.MaxObjectBytes, 1, hi)
	}
	v.between(member(path, "default_ttl_s"), c.DefaultTTLSeconds, 0, MaxCacheTTLSeconds)
	vh := member(path, "vary_headers")
	if n := len(c.VaryHeaders); n > MaxCacheVaryHeaders {
		v.probs.add(vh, "at most %d field names, got %d", MaxCacheVaryHeaders, n)
	}
	var seen []string
	for i, h := range c.VaryHeaders {
		p := fmt.Sprintf("%s[%d]", vh, i)
		low := strings.ToLower(h)
		switch {
		case len(h) > 64 || !isToken(h):
			v.probs.add(p, "must be an HTTP field name (a token of at most 64 characters), got %s", quote(h))
		case slices.Contains(unvaryable, low):
			v.probs.add(p, "%s is a field the gateway sets or the connection needs; name a request field the answers vary by, e.g. Accept-Language", quote(h))
		case slices.Contains(seen, low):
			v.probs.add(p, "%s is named twice", quote(h))
		}
		seen = append(seen, low)
	}
}

// Equal reports whether c and o are the same settings (nil equals nil).
func (c *Cache) Equal(o *Cache) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.MaxBytes == o.MaxBytes && c.MaxObjectBytes == o.MaxObjectBytes &&
		c.DefaultTTLSeconds == o.DefaultTTLSeconds && slices.Equal(c.VaryHeaders, o.VaryHeaders)
}
