package teststat

import (
	"math"
	"testing"
)

func TestChiSquare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		observed, weights []int
		want              float64
	}{
		{[]int{90, 10}, []int{9, 1}, 0},
		{[]int{80, 20}, []int{9, 1}, 100.0/90 + 100.0/10},
		{[]int{50, 0, 50}, []int{1, 0, 1}, 0},
		{[]int{50, 1, 50}, []int{1, 0, 1}, math.Inf(1)},
	}
	for _, tt := range tests {
		if got := ChiSquare(tt.observed, tt.weights); math.Abs(got-tt.want) > 1e-9 && got != tt.want {
			t.Errorf("ChiSquare(%v, %v) = %v, want %v", tt.observed, tt.weights, got, tt.want)
		}
	}
	if Critical001[1] != 10.828 {
		t.Errorf("critical value at 1 df = %v", Critical001[1])
	}
}
