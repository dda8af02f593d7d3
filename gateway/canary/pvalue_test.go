package canary

import (
	"math"
	"testing"
)

func TestPValueEqualRates(t *testing.T) {
	for _, c := range [][4]uint64{{20, 1000, 20, 1000}, {5, 100, 50, 1000}, {1, 3, 2, 6}} {
		if p := PValue(c[0], c[1], c[2], c[3]); math.Abs(p-1) > 1e-12 {
			t.Errorf("PValue%v = %v, want 1", c, p)
		}
	}
}

func TestPValueKnownCase(t *testing.T) {
	// 20/1000 against 50/1000, by hand: pooled p = 70/2000 = 0.035,
	// se = sqrt(0.035 * 0.965 * (1/1000 + 1/1000)) = sqrt(6.755e-5)
	//    = 0.0082188807,
	// z = (0.02 - 0.05) / se = -3.6501321,
	// p-value = erfc(3.6501321 / sqrt 2) = 0.00026211.
	const want = 0.000262105511
	p := PValue(20, 1000, 50, 1000)
	if math.Abs(p-want) > 1e-9 {
		t.Fatalf("PValue(20, 1000, 50, 1000) = %.12f, want %.12f", p, want)
	}
	if q := PValue(50, 1000, 20, 1000); q != p {
		t.Fatalf("PValue is not symmetric: %v vs %v", q, p)
	}
	// A small difference on small samples is not significant.
	if p := PValue(2, 100, 3, 100); p < 0.5 {
		t.Fatalf("PValue(2, 100, 3, 100) = %v, want > 0.5", p)
	}
}

func TestPValueDegenerate(t *testing.T) {
	tests := []struct {
		name               string
		errA, nA, errB, nB uint64
	}{
		{"no samples A", 0, 0, 5, 100},
		{"no samples B", 5, 100, 0, 0},
		{"no samples at all", 0, 0, 0, 0},
		{"pooled rate 0", 0, 100, 0, 1000},
		{"pooled rate 1", 100, 100, 1000, 1000},
		{"errors above requests clamp to rate 1", 200, 100, 1000, 1000},
	}
	for _, tt := range tests {
		if p := PValue(tt.errA, tt.nA, tt.errB, tt.nB); p != 1 {
			t.Errorf("%s: PValue = %v, want 1", tt.name, p)
		}
	}
}
