package canary

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// logUniform returns a duration log-uniformly spread over [1ns, max).
func logUniform(r *rand.Rand, max time.Duration) time.Duration {
	return time.Duration(math.Exp(r.Float64() * math.Log(float64(max))))
}

func TestBucketsCount(t *testing.T) {
	if Buckets != 1408 {
		t.Fatalf("Buckets = %d, want 1408", Buckets)
	}
}

func TestBucketOfBoundaries(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0},
		{0, 0},
		{999 * time.Nanosecond, 0},
		{time.Microsecond, 1},
		{127*time.Microsecond + 999, 127},
		{128 * time.Microsecond, 128},
		{129 * time.Microsecond, 128}, // [128, 130) is one bucket of width 2
		{130 * time.Microsecond, 129},
		{255 * time.Microsecond, 191},
		{256 * time.Microsecond, 192},
		{(1<<27 - 1) * time.Microsecond, Buckets - 1},
		{(1 << 27) * time.Microsecond, Buckets - 1},
		{time.Hour, Buckets - 1},
		{math.MaxInt64, Buckets - 1},
	}
	for _, tt := range tests {
		if got := BucketOf(tt.d); got != tt.want {
			t.Errorf("BucketOf(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestBucketValueRoundTrip(t *testing.T) {
	prev := time.Duration(-1)
	for i := range Buckets {
		v := BucketValue(i)
		if v <= prev {
			t.Fatalf("BucketValue(%d) = %v, not above BucketValue(%d) = %v", i, v, i-1, prev)
		}
		prev = v
		if got := BucketOf(v); got != i {
			t.Fatalf("BucketOf(BucketValue(%d) = %v) = %d", i, v, got)
		}
	}
	if BucketValue(-5) != BucketValue(0) || BucketValue(Buckets+3) != BucketValue(Buckets-1) {
		t.Error("BucketValue does not clamp out-of-range indexes")
	}
}

func TestBucketOfMonotonic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ds := make([]time.Duration, 20000)
	for i := range ds {
		ds[i] = logUniform(r, 200*time.Second)
	}
	slices.Sort(ds)
	for i := 1; i < len(ds); i++ {
		if BucketOf(ds[i]) < BucketOf(ds[i-1]) {
			t.Fatalf("BucketOf(%v) = %d < BucketOf(%v) = %d", ds[i], BucketOf(ds[i]), ds[i-1], BucketOf(ds[i-1]))
		}
	}
}

// checkBound fails t unless BucketValue(BucketOf(d)) is within the documented
// error of d.
func checkBound(t *testing.T, d time.Duration) {
	t.Helper()
	v := BucketValue(BucketOf(d))
	diff := v - d
	if diff < 0 {
		diff = -diff
	}
	if d < 128*time.Microsecond {
		if diff > time.Microsecond/2 {
			t.Fatalf("d = %v: value %v is %v off, want <= 0.5µs", d, v, diff)
		}
		return
	}
	if float64(diff)*128 > float64(d) {
		t.Fatalf("d = %v: value %v is %v off, relative %.6f > 1/128", d, v, diff, float64(diff)/float64(d))
	}
}

func TestBucketValueErrorBound(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 7))
	limit := time.Duration(1<<27) * time.Microsecond
	for range 200000 {
		checkBound(t, logUniform(r, limit))
	}
	// Every bucket's edges, where the error is largest: the lowest duration
	// in the bucket and the one just below the next bucket.
	for i := range Buckets - 1 {
		lo, next := bucketLow(i), bucketLow(i+1)
		if BucketOf(lo) != i || BucketOf(next-1) != i {
			t.Fatalf("bucket %d: edges %v..%v map to %d..%d", i, lo, next-1, BucketOf(lo), BucketOf(next-1))
		}
		checkBound(t, lo)
		checkBound(t, next-1)
	}
	checkBound(t, bucketLow(Buckets-1))
	checkBound(t, time.Duration(1<<27)*time.Microsecond-1)
}

// bucketLow returns the smallest non-negative duration in bucket i, found
// by binary search over BucketOf.
func bucketLow(i int) time.Duration {
	lo, hi := time.Duration(0), time.Duration(1<<27)*time.Microsecond
	for lo < hi {
		mid := lo + (hi-lo)/2
		if BucketOf(mid) >= i {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func TestQuantileEmpty(t *testing.T) {
	var h Histogram
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if got := h.Quantile(q); got != 0 {
			t.Errorf("empty Quantile(%v) = %v, want 0", q, got)
		}
	}
}

func TestQuantileUniform(t *testing.T) {
	var h Histogram
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	tests := []struct {
		q    float64
		want time.Duration // the exact ceil(q*n)-th value
	}{
		{-1, time.Millisecond},
		{0, time.Millisecond},
		{0.001, time.Millisecond},
		{0.07, 70 * time.Millisecond}, // 0.07*1000 rounds to 70.00000000000001
		{0.5, 500 * time.Millisecond},
		{0.5001, 501 * time.Millisecond},
		{0.99, 990 * time.Millisecond},
		{1, 1000 * time.Millisecond},
		{2, 1000 * time.Millisecond},
		{math.NaN(), time.Millisecond},
	}
	for _, tt := range tests {
		got := h.Quantile(tt.q)
		if want := BucketValue(BucketOf(tt.want)); got != want {
			t.Errorf("Quantile(%v) = %v, want %v (bucket of %v)", tt.q, got, want, tt.want)
		}
		if diff := math.Abs(float64(got - tt.want)); diff*128 > float64(tt.want) {
			t.Errorf("Quantile(%v) = %v, more than 1/128 from %v", tt.q, got, tt.want)
		}
	}
}

func TestQuantileSmallCounts(t *testing.T) {
	var h Histogram
	for i := 1; i <= 100; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	// ceil(0.07*100) = 7, despite 0.07*100 being 7.000000000000001.
	if got, want := h.Quantile(0.07), BucketValue(7); got != want {
		t.Errorf("Quantile(0.07) = %v, want %v", got, want)
	}
	if got, want := h.Quantile(0.99), BucketValue(99); got != want {
		t.Errorf("Quantile(0.99) = %v, want %v", got, want)
	}
}

func TestQuantileExponential(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var h Histogram
	ds := make([]time.Duration, 50000)
	for i := range ds {
		ds[i] = time.Duration(r.ExpFloat64() * float64(20*time.Millisecond))
		h.Record(ds[i])
	}
	slices.Sort(ds)
	n := float64(len(ds))
	for _, q := range []float64{0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999} {
		exact := ds[int(math.Ceil(q*n))-1]
		got := h.Quantile(q)
		if want := BucketValue(BucketOf(exact)); got != want {
			t.Errorf("Quantile(%v) = %v, want %v (bucket of the exact %v)", q, got, want, exact)
		}
		if diff := math.Abs(float64(got - exact)); exact >= 128*time.Microsecond && diff*128 > float64(exact) {
			t.Errorf("Quantile(%v) = %v, more than 1/128 from %v", q, got, exact)
		}
	}
	// The p99 of an exponential of mean 20ms is 20ms*ln(100) = 92.1ms.
	if p99 := h.Quantile(0.99); p99 < 85*time.Millisecond || p99 > 100*time.Millisecond {
		t.Errorf("p99 = %v, want about 92ms", p99)
	}
}

func TestHistogramMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var a, b, union Histogram
	for range 10000 {
		d := logUniform(r, 10*time.Second)
		union.Record(d)
		if r.IntN(3) == 0 {
			a.Record(d)
		} else {
			b.Record(d)
		}
	}
	merged := a
	merged.Add(&b)
	if merged != union {
		t.Fatal("a + b differs from the histogram of the union")
	}
	if merged.Count() != 10000 || a.Count()+b.Count() != 10000 {
		t.Fatalf("counts: merged %d, a %d + b %d, want 10000", merged.Count(), a.Count(), b.Count())
	}
	merged.Add(nil)
	if merged != union {
		t.Fatal("Add(nil) changed the histogram")
	}
}

func TestSparseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	var h Histogram
	for range 3000 {
		h.Record(logUniform(r, 300*time.Second))
	}
	h[0] += 5
	h[Buckets-1] += 7

	var empty Histogram
	if got := empty.AppendSparse(nil); len(got) != 0 {
		t.Fatalf("empty AppendSparse = %v, want nothing", got)
	}

	prefix := [][2]uint64{{99, 99}}
	pairs := h.AppendSparse(prefix)
	if pairs[0] != prefix[0] {
		t.Fatal("AppendSparse overwrote dst")
	}
	pairs = pairs[1:]
	nonZero := 0
	for _, c := range h {
		if c != 0 {
			nonZero++
		}
	}
	if len(pairs) != nonZero {
		t.Fatalf("%d pairs, want %d non-zero buckets", len(pairs), nonZero)
	}
	for i, p := range pairs {
		if p[1] == 0 {
			t.Fatalf("pair %d %v has a zero count", i, p)
		}
		if i > 0 && p[0] <= pairs[i-1][0] {
			t.Fatalf("pairs not ascending at %d: %v after %v", i, p, pairs[i-1])
		}
	}

	var back Histogram
	if err := back.AddSparse(pairs); err != nil {
		t.Fatalf("AddSparse: %v", err)
	}
	if back != h {
		t.Fatal("round trip differs")
	}
	// Adding again doubles.
	if err := back.AddSparse(pairs); err != nil {
		t.Fatalf("AddSparse: %v", err)
	}
	for i := range h {
		if back[i] != 2*h[i] {
			t.Fatalf("bucket %d = %d after adding twice, want %d", i, back[i], 2*h[i])
		}
	}
	if err := back.AddSparse(nil); err != nil {
		t.Fatalf("AddSparse(nil): %v", err)
	}
}

func TestSparseRefused(t *testing.T) {
	tests := []struct {
		name  string
		pairs [][2]uint64
	}{
		{"index out of range", [][2]uint64{{1, 1}, {Buckets, 1}}},
		{"huge index", [][2]uint64{{math.MaxUint64, 1}}},
		{"descending", [][2]uint64{{5, 1}, {3, 1}}},
		{"duplicate", [][2]uint64{{5, 1}, {6, 1}, {6, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			h[2] = 4
			before := h
			if err := h.AddSparse(tt.pairs); err == nil {
				t.Fatal("AddSparse accepted bad input")
			}
			if h != before {
				t.Fatal("AddSparse added something before refusing")
			}
		})
	}
}
