package split

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dwara/dwara/internal/teststat"
)

// testKeys returns n random request-id-like keys from a fixed seed.
func testKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]string, n)
	var b [16]byte
	for i := range keys {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys[i] = hex.EncodeToString(b[:])
	}
	return keys
}

func TestPickRatiosChiSquare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights []int
	}{
		{"95/5", []int{95, 5}},
		{"50/50", []int{50, 50}},
		{"1/99", []int{1, 99}},
		{"4-way 40/30/20/10", []int{40, 30, 20, 10}},
		{"with a zero 70/0/30", []int{70, 0, 30}},
	}
	keys := testKeys(40000, 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := New(tt.weights)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int, len(tt.weights))
			for _, k := range keys {
				counts[s.Pick(k)]++
			}
			df := -1
			for i, w := range tt.weights {
				if w == 0 && counts[i] != 0 {
					t.Fatalf("weight-0 target %d picked %d times", i, counts[i])
				}
				if w > 0 {
					df++
				}
			}
			chi := teststat.ChiSquare(counts, tt.weights)
			if crit := teststat.Critical001[df]; chi > crit {
				t.Errorf("counts %v for weights %v: chi-square %.2f > %.3f (df %d, p = 0.001)", counts, tt.weights, chi, crit, df)
			}
		})
	}
}

func TestPickDeterministic(t *testing.T) {
	t.Parallel()
	// Two Splits compiled from the same weights, as two proxy replicas
	// would, send every key to the same target.
	s, _ := New([]int{3, 4, 5})
	replica, _ := New([]int{3, 4, 5})
	for _, k := range testKeys(1000, 2) {
		if got, want := replica.Pick(k), s.Pick(k); got != want {
			t.Fatalf("key %q picked %d by one Split and %d by its replica", k, want, got)
		}
	}
	// FNV-1a 64 reference values.
	if got := Hash(""); got != 0xcbf29ce484222325 {
		t.Errorf("Hash(\"\") = %#x", got)
	}
	if got := Hash("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("Hash(\"a\") = %#x", got)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	const maxInt = int(^uint(0) >> 1)
	for _, w := range [][]int{nil, {}, {0, 0}, {1, -1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}, {maxInt, maxInt, 3}} {
		if _, err := New(w); err == nil {
			t.Errorf("New(%v) accepted", w)
		}
	}
}

// moved counts keys whose pick differs between two splits, and how many of
// them moved from target `from` to target `to`.
func moved(keys []string, a, b *Split, from, to int) (n, directed int) {
	for _, k := range keys {
		pa, pb := a.Pick(k), b.Pick(k)
		if pa != pb {
			n++
			if pa == from && pb == to {
				directed++
			}
		}
	}
	return n, directed
}

func TestMovedKeys(t *testing.T) {
	t.Parallel()
	keys := testKeys(100000, 3)
	mk := func(w ...int) *Split {
		s, err := New(w)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("95/5 to 90/10 moves 5% stable->canary", func(t *testing.T) {
		n, directed := moved(keys, mk(95, 5), mk(90, 10), 0, 1)
		share := float64(n) / float64(len(keys))
		if math.Abs(share-0.05) > 0.005 {
			t.Errorf("moved share %.4f, want 0.05 ± 0.005", share)
		}
		if directed != n {
			t.Errorf("%d of %d moved keys went stable->canary, want all", directed, n)
		}
	})
	t.Run("100/0 to 0/100 moves all", func(t *testing.T) {
		n, _ := moved(keys, mk(100, 0), mk(0, 100), 0, 1)
		if n != len(keys) {
			t.Errorf("moved %d of %d keys", n, len(keys))
		}
	})
	t.Run("95/5 to 95/10 reshuffles", func(t *testing.T) {
		n, _ := moved(keys, mk(95, 5), mk(95, 10), 0, 1)
		share := float64(n) / float64(len(keys))
		if share < 0.10 {
			t.Errorf("moved share %.4f, want far more than 0.05 (a total change reshuffles)", share)
		}
	})
}

func TestPickExcluding(t *testing.T) {
	t.Parallel()
	s, _ := New([]int{50, 30, 20})
	keys := testKeys(30000, 4)
	counts := make([]int, 3)
	for _, k := range keys {
		h := Hash(k)
		i := s.PickExcluding(h, 1<<0)
		if i == 0 {
			t.Fatal("excluded target picked")
		}
		counts[i]++
		if s.PickExcluding(h, 0) != s.PickHash(h) {
			t.Fatal("PickExcluding with nothing excluded differs from PickHash")
		}
	}
	if chi := teststat.ChiSquare(counts[1:], []int{30, 20}); chi > teststat.Critical001[1] {
		t.Errorf("failover counts %v: chi-square %.2f over 30/20", counts, chi)
	}
	if got := s.PickExcluding(1, 0b111); got != -1 {
		t.Errorf("all excluded: got %d, want -1", got)
	}
}

func TestPickAllocs(t *testing.T) {
	s, _ := New([]int{95, 5})
	if a := testing.AllocsPerRun(1000, func() { s.Pick("0123456789abcdef01234567") }); a != 0 {
		t.Errorf("Pick allocates %.1f times", a)
	}
	if a := testing.AllocsPerRun(1000, func() { s.PickExcluding(Hash("0123456789abcdef01234567"), 1) }); a != 0 {
		t.Errorf("PickExcluding allocates %.1f times", a)
	}
}

func BenchmarkPick(b *testing.B) {
	s, _ := New([]int{95, 5})
	key := "0123456789abcdef01234567"
	b.ReportAllocs()
	for b.Loop() {
		s.Pick(key)
	}
}
