package proxy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestByLength: byLength orders services as a stable sort by base path
// length, longest first, does.
func TestByLength(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 50 {
		ss := make([]*service, n)
		for i := range ss {
			ss[i] = &service{name: strings.Repeat("s", i), basePath: "/" + strings.Repeat("x", r.IntN(6))}
		}
		want := slices.Clone(ss)
		slices.SortStableFunc(want, func(a, b *service) int { return len(b.basePath) - len(a.basePath) })
		byLength(ss)
		if !slices.Equal(ss, want) {
			t.Fatalf("%d services: byLength and a stable sort differ", n)
		}
	}
}
