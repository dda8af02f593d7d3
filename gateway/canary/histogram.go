package canary

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Layout of the histogram's buckets, in microseconds.
const (
	// linearBuckets values below 128 µs get one bucket per microsecond.
	linearBuckets = 128
	// linearExp is log2(linearBuckets): the first power of two split
	// log-linearly.
	linearExp = 7
	// subBuckets is how many equal buckets each power of two is split into.
	subBuckets = 64
	// subBits is log2(subBuckets).
	subBits = 6
	// maxExp is the first power of two not covered: values at or above
	// 2^maxExp µs (about 134 s) go into the last bucket.
	maxExp = 27
)

// Buckets is the number of buckets of a Histogram: 128 one-microsecond
// buckets below 128 µs, then 64 buckets for each power of two
// [2^k, 2^(k+1)) µs for k = 7..26.
const Buckets = linearBuckets + (maxExp-linearExp)*subBuckets

// BucketOf returns the index of the bucket holding d, in [0, Buckets). A
// negative d is in bucket 0; d at or above 2^27 µs (about 134 s) is in the
// last bucket. It does not allocate and is safe for concurrent use.
func BucketOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	u := uint64(d / time.Microsecond)
	if u < linearBuckets {
		return int(u)
	}
	k := bits.Len64(u) - 1 // u is in [2^k, 2^(k+1)), k >= 7
	if k >= maxExp {
		return Buckets - 1
	}
	sub := int(u>>(k-subBits)) & (subBuckets - 1)
	return linearBuckets + (k-linearExp)*subBuckets + sub
}

// BucketValue returns the midpoint of bucket i, the value a Histogram
// reports for anything in that bucket; an i outside [0, Buckets) is clamped
// to that range. For a duration d below 128 µs, BucketValue(BucketOf(d)) is
// within 0.5 µs of d; from 128 µs up to 2^27 µs it is within d/128 of d
// (relative error at most 1/128). Values at or above 2^27 µs all report the
// last bucket's midpoint. Safe for concurrent use.
func BucketValue(i int) time.Duration {
	i = min(max(i, 0), Buckets-1)
	if i < linearBuckets {
		return time.Duration(i)*time.Microsecond + time.Microsecond/2
	}
	j := i - linearBuckets
	k := linearExp + j/subBuckets
	width := uint64(1) << (k - subBits)
	low := uint64(1)<<k + uint64(j%subBuckets)*width
	return time.Duration(low+width/2) * time.Microsecond
}

// Histogram counts durations in Buckets fixed buckets (see BucketOf). The
// zero value is an empty histogram, ready to use. Histograms merge by adding
// their counts, so the histogram of a union of samples is the sum of their
// histograms. A Histogram is a plain value: it is not safe for concurrent
// use while one goroutine modifies it.
type Histogram [Buckets]uint64

// Record counts one duration d in its bucket.
func (h *Histogram) Record(d time.Duration) {
	h[BucketOf(d)]++
}

// Add adds the counts of o to h. A nil o adds nothing.
func (h *Histogram) Add(o *Histogram) {
	if o == nil {
		return
	}
	for i, c := range o {
		h[i] += c
	}
}

// Count returns the number of durations counted in h.
func (h *Histogram) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile of h: the midpoint of the bucket holding
// the ceil(q*n)-th smallest of the n counted values (the first for q <= 0
// or NaN, the last for q >= 1). A product q*n within a relative 1e-9 above
// an integer is taken as that integer, so that float rounding (0.07*100 is
// 7.000000000000001) does not move the rank. An empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := quantileRank(q, n)
	var seen uint64
	for i, c := range h {
		seen += c
		if seen >= rank {
			return BucketValue(i)
		}
	}
	return BucketValue(Buckets - 1) // not reached: seen ends at n >= rank
}

// quantileRank returns ceil(q*n) clamped to [1, n], forgiving float error
// just above an integer.
func quantileRank(q float64, n uint64) uint64 {
	if !(q > 0) {
		return 1
	}
	if q >= 1 {
		return n
	}
	x := q * float64(n)
	r := math.Ceil(x)
	if f := math.Floor(x); f >= 1 && x-f <= 1e-9*x {
		r = f
	}
	if r < 1 {
		return 1
	}
	if r >= float64(n) {
		return n
	}
	return uint64(r)
}

// AppendSparse appends to dst a pair [bucket index, count] for each
// non-zero bucket of h, in ascending bucket order, and returns the extended
// slice. An empty histogram appends nothing; dst may be nil.
func (h *Histogram) AppendSparse(dst [][2]uint64) [][2]uint64 {
	for i, c := range h {
		if c != 0 {
			dst = append(dst, [2]uint64{uint64(i), c})
		}
	}
	return dst
}

// errSparseOrder is returned by AddSparse for pairs not strictly ascending.
var errSparseOrder = errors.New("sparse histogram: bucket indexes not strictly ascending")

// AddSparse adds to h the counts of pairs as encoded by AppendSparse:
// [bucket index, count] with indexes strictly ascending. Zero counts are
// allowed and add nothing; nil or empty pairs add nothing. An index not
// below Buckets or a pair list not strictly ascending is refused with an
// error, and then nothing at all is added.
func (h *Histogram) AddSparse(pairs [][2]uint64) error {
	for i, p := range pairs {
		if p[0] >= Buckets {
			return fmt.Errorf("sparse histogram: bucket index %d out of range [0, %d)", p[0], Buckets)
		}
		if i > 0 && p[0] <= pairs[i-1][0] {
			return errSparseOrder
		}
	}
	for _, p := range pairs {
		h[p[0]] += p[1]
	}
	return nil
}
