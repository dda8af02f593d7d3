package config

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dwara/dwara/gateway/split"
)

// weighting builds targets from upstream, weight pairs.
func weighting(kv ...any) []Target {
	var out []Target
	for i := 0; i < len(kv); i += 2 {
		out = append(out, Target{Upstream: kv[i].(string), Weight: kv[i+1].(int)})
	}
	return out
}

func TestDisplacement(t *testing.T) {
	t.Parallel()
	w := weighting
	tests := []struct {
		name string
		a, b []Target
		want float64
	}{
		{"unchanged", w("s", 95, "c", 5), w("s", 95, "c", 5), 0},
		{"ramp 95/5 to 90/10", w("s", 95, "c", 5), w("s", 90, "c", 10), 0.05},
		{"flip 100/0 to 0/100", w("s", 100, "c", 0), w("s", 0, "c", 100), 1},
		{"flip 90/10 to 10/90", w("s", 90, "c", 10), w("s", 10, "c", 90), 0.8},
		{"single upstream to same", w("s", 1), w("s", 1), 0},
		{"single upstream to another", w("s", 1), w("c", 1), 1},
		{"4-way shift", w("a", 25, "b", 25, "c", 25, "d", 25), w("a", 25, "b", 25, "c", 50, "d", 0), 0.25},
		{"zero-weight target in the middle", w("a", 50, "z", 0, "b", 50), w("a", 50, "b", 50), 0},
		{"reorder", w("s", 50, "c", 50), w("c", 50, "s", 50), 1},
		{"total change 1/1 to 1/2", w("s", 1, "c", 1), w("s", 1, "c", 2), 0.5}, // residues mod lcm 6: 2, 3, 4 move
		{"empty to something", nil, w("s", 1), 1},
		{"empty to empty", nil, nil, 0},
		{"all zero to all zero", w("s", 0), w("c", 0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Displacement(tt.a, tt.b); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Displacement = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("large totals use the key sample", func(t *testing.T) {
		t.Parallel()
		// Totals 999,999 and 1,000,002 have an lcm far past the exact limit;
		// two near-even halves of unrelated totals move about half the keys.
		got := Displacement(w("s", 500000, "c", 499999), w("s", 500001, "c", 500001))
		if math.Abs(got-0.5) > 0.01 {
			t.Errorf("Displacement across large totals = %v, want 0.5 ± 0.01", got)
		}
	})
}

// TestDisplacementMatchesPicks checks Displacement against the share of
// random request keys that the split pick really moves.
func TestDisplacementMatchesPicks(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 3^0x9e3779b97f4a7c15))
	keys := make([]string, 100000)
	var b [16]byte
	for i := range keys {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys[i] = hex.EncodeToString(b[:])
	}
	compile := func(ts []Target) *split.Split {
		weights := make([]int, len(ts))
		for i, tg := range ts {
			weights[i] = tg.Weight
		}
		s, err := split.New(weights)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w := weighting
	tests := []struct {
		name string
		a, b []Target
	}{
		{"ramp 95/5 to 90/10", w("s", 95, "c", 5), w("s", 90, "c", 10)},
		{"total change 95/5 to 95/10 reshuffles", w("s", 95, "c", 5), w("s", 95, "c", 10)},
		{"3-way total change", w("a", 40, "b", 30, "c", 30), w("a", 10, "b", 45, "c", 7)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sa, sb := compile(tt.a), compile(tt.b)
			moved := 0
			for _, k := range keys {
				if tt.a[sa.Pick(k)].Upstream != tt.b[sb.Pick(k)].Upstream {
					moved++
				}
			}
			share := float64(moved) / float64(len(keys))
			if want := Displacement(tt.a, tt.b); math.Abs(share-want) > 0.005 {
				t.Errorf("measured share %.4f, Displacement says %.4f", share, want)
			}
		})
	}
}
