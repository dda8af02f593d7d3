// Package teststat holds the statistics the tests of split ratios use: a
// chi-square goodness-of-fit statistic and its critical values at
// p = 0.001. It is for tests only; nothing in the product imports it.
package teststat

import "math"

// Critical001 is the chi-square critical value at p = 0.001 by degrees of
// freedom (1..7): a statistic above it rejects the expected shares with
// 99.9% confidence.
var Critical001 = map[int]float64{1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}

// ChiSquare returns Pearson's statistic of observed counts against the
// shares implied by weights (same length). A count where the weight
// expects none makes it +Inf; a weight-0 category with no count adds
// nothing.
func ChiSquare(observed, weights []int) float64 {
	var n, tw float64
	for i := range observed {
		n += float64(observed[i])
		tw += float64(weights[i])
	}
	var chi float64
	for i := range observed {
		exp := n * float64(weights[i]) / tw
		if exp == 0 {
			if observed[i] != 0 {
				return math.Inf(1)
			}
			continue
		}
		d := float64(observed[i]) - exp
		chi += d * d / exp
	}
	return chi
}
