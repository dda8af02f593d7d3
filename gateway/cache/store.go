package cache

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// Options configure a Store.
type Options struct {
	// MaxBytes bounds the weight of the stored entries (their heads,
	// bodies, keys and a fixed overhead each: Entry.weight); required.
	MaxBytes int
	// MaxObjectBytes bounds one body; the caller stops buffering an
	// answer beyond it. 0 means MaxBytes.
	MaxObjectBytes int
	// DefaultTTL is the lifetime of an answer cacheable by default that
	// carries none (Storable); 0 stores none such.
	DefaultTTL time.Duration
	// VaryHeaders are request fields every key varies by, as if each
	// answer named them in Vary.
	VaryHeaders []string
	// Now is the clock; nil means time.Now. Tests move it.
	Now func() time.Time
	// OnEvict, when not nil, is called for each entry evicted to keep the
	// bound (not for one invalidated, purged or replaced). It runs under a
	// lock of the store: it must not call it.
	OnEvict func()
}

// Store is one service's stored answers: otter's W-TinyLFU cache weighed
// in bytes, keyed by strings that the proxy builds with Key (the branch,
// the host and the request target) and the Vary'd fields, and the
// requests in flight to fill it (Lead). It is safe for concurrent use.
type Store struct {
	c   *otter.Cache[string, *Entry]
	o   Options
	ids atomic.Uint64

	mu      sync.Mutex
	flights map[string]*Flight
	// waiting counts the requests waiting for a flight.
	waiting atomic.Int64
}

// New returns an empty Store bounded by o.MaxBytes.
func New(o Options) (*Store, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxObjectBytes <= 0 {
		o.MaxObjectBytes = o.MaxBytes
	}
	vary := make([]string, len(o.VaryHeaders))
	for i, h := range o.VaryHeaders {
		vary[i] = strings.ToLower(h)
	}
	slices.Sort(vary)
	o.VaryHeaders = vary
	s := &Store{o: o, flights: make(map[string]*Flight)}
	var err error
	s.c, err = otter.New(&otter.Options[string, *Entry]{
		MaximumWeight: uint64(o.MaxBytes),
		Weigher:       func(k string, e *Entry) uint32 { return e.weight(k) },
		OnAtomicDeletion: func(ev otter.DeletionEvent[string, *Entry]) {
			if ev.WasEvicted() && o.OnEvict != nil {
				o.OnEvict()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Now is the store's clock.
func (s *Store) Now() time.Time { return s.o.Now() }

// MaxObjectBytes is the largest body stored.
func (s *Store) MaxObjectBytes() int { return s.o.MaxObjectBytes }

// DefaultTTL is Options.DefaultTTL.
func (s *Store) DefaultTTL() time.Duration { return s.o.DefaultTTL }

// Key appends to dst the key of a request target (path and query, as
// forwarded) on host (lower-cased, its port dropped by the caller or not,
// consistently) answered by branch: the key of its answer before any Vary.
func Key(dst []byte, branch, host, target string) []byte {
	dst = append(dst, branch...)
	dst = append(dst, 0)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	dst = append(dst, 0)
	return append(dst, target...)
}

// Lookup returns the entry stored for the request whose Key is primary
// and whose field values get gives (nil when none), and the key its
// answer is stored under, which is also the key of its flight (Lead).
func (s *Store) Lookup(primary string, get func(name string) string) (*Entry, string) {
	e, ok := s.c.GetIfPresent(primary)
	switch {
	case ok && !e.marker:
		return e, primary
	case ok:
		key := s.variantKey(primary, e, get)
		v, _ := s.c.GetIfPresent(key)
		return v, key
	case len(s.o.VaryHeaders) > 0:
		// No answer yet: requests differing in the configured fields
		// fill their own.
		return nil, string(VaryKey([]byte(primary+"\x01?"), s.o.VaryHeaders, get))
	}
	return nil, primary
}

// variantKey is the key of the answer varying as the marker m says for a
// request whose fields get gives.
func (s *Store) variantKey(primary string, m *Entry, get func(string) string) string {
	b := make([]byte, 0, len(primary)+64)
	b = append(b, primary...)
	b = append(b, 1)
	b = strconv.AppendUint(b, m.id, 10)
	b = append(b, 0)
	return string(VaryKey(b, m.vary, get))
}

// Put stores e, the answer to the request whose Key is primary and whose
// fields get gives, which varies by vary (the answer's Vary names, lower
// case) and the configured fields. Answers that vary are stored under a
// marker at primary that names the fields, each under the values of its
// request; a marker naming other fields replaces the one there, which
// leaves the older answers unreachable until they are evicted. An entry
// heavier than the whole bound is not stored.
func (s *Store) Put(primary string, get func(string) string, e *Entry, vary []string) {
	names := s.o.VaryHeaders
	if len(vary) > 0 {
		names = slices.Clone(names)
		for _, v := range vary {
			if !slices.Contains(names, v) {
				names = append(names, v)
			}
		}
		slices.Sort(names)
	}
	if len(names) == 0 {
		s.c.Set(primary, e)
		return
	}
	m, ok := s.c.GetIfPresent(primary)
	if !ok || !m.marker || !slices.Equal(m.vary, names) {
		m = &Entry{marker: true, vary: names, id: s.ids.Add(1), Path: e.Path}
		s.c.Set(primary, m)
	}
	s.c.Set(s.variantKey(primary, m, get), e)
}

// Replace stores e under key, which Lookup gave for the entry it
// refreshes (a 304).
func (s *Store) Replace(key string, e *Entry) { s.c.Set(key, e) }

// Invalidate removes the answers stored for primary (a URL of a branch):
// the answer there or the marker of those that vary, which makes them
// unreachable.
func (s *Store) Invalidate(primary string) { s.c.Invalidate(primary) }

// Purge removes every entry whose request path starts with prefix, every
// entry for "", and returns how many it removed.
func (s *Store) Purge(prefix string) int {
	if prefix == "" {
		n := s.c.EstimatedSize()
		s.c.InvalidateAll()
		return n
	}
	n := 0
	for k, e := range s.c.All() {
		if strings.HasPrefix(e.Path, prefix) {
			if _, ok := s.c.Invalidate(k); ok {
				n++
			}
		}
	}
	return n
}

// Len is the number of entries stored (markers included), Bytes their
// weight.
func (s *Store) Len() int      { return s.c.EstimatedSize() }
func (s *Store) Bytes() uint64 { return s.c.WeightedSize() }

// CleanUp does the store's pending maintenance (evictions to the bound
// among them) now rather than when otter next gets to it.
func (s *Store) CleanUp() { s.c.CleanUp() }

// Waiting is how many requests wait for a flight to land.
func (s *Store) Waiting() int64 { return s.waiting.Load() }

// Close empties the store and stops otter's goroutines; the store is not
// to be used after.
func (s *Store) Close() {
	s.c.InvalidateAll()
	s.c.StopAllGoroutines()
}

// Flight is one request filling an entry, which others of the same key
// wait for (collapsed forwarding).
type Flight struct {
	done chan struct{}
	key  string
	s    *Store
}

// Lead returns the flight of key: a new one that the caller leads (and
// must Land), or, with leader false, the one in flight to wait for.
func (s *Store) Lead(key string) (f *Flight, leader bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.flights[key]; f != nil {
		return f, false
	}
	f = &Flight{done: make(chan struct{}), key: key, s: s}
	s.flights[key] = f
	return f, true
}

// Land ends the flight: whatever it stored (or not) is there for those
// waiting. It may be called more than once.
func (f *Flight) Land() {
	s := f.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[f.key] == f {
		delete(s.flights, f.key)
		close(f.done)
	}
}

// Wait waits for the flight to land, for ctx to be done or for limit to
// pass, and reports whether it landed.
func (f *Flight) Wait(ctx context.Context, limit time.Duration) bool {
	f.s.waiting.Add(1)
	defer f.s.waiting.Add(-1)
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-f.done:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}
