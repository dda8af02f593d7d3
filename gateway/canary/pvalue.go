package canary

import "math"

// PValue returns the two-sided p-value of a pooled two-proportion z-test
// of the error rate errA/nA against errB/nB: with the pooled rate
// p = (errA+errB)/(nA+nB), z = (errA/nA - errB/nB) / sqrt(p(1-p)(1/nA+1/nB))
// and the p-value erfc(|z|/sqrt 2). It returns 1 when either side has no
// samples or the pooled rate is 0 or 1 (nothing to tell apart). An error
// count above its sample count is taken as equal to it. Safe for concurrent
// use.
func PValue(errA, nA, errB, nB uint64) float64 {
	if nA == 0 || nB == 0 {
		return 1
	}
	errA, errB = min(errA, nA), min(errB, nB)
	a, b := float64(nA), float64(nB)
	p := (float64(errA) + float64(errB)) / (a + b)
	if p <= 0 || p >= 1 {
		return 1
	}
	se := math.Sqrt(p * (1 - p) * (1/a + 1/b))
	z := (float64(errA)/a - float64(errB)/b) / se
	return math.Erfc(math.Abs(z) / math.Sqrt2)
}
