package canary

import (
	"fmt"

	"github.com/dwara/dwara/api/apiv1"
)

// Stats is one version's requests over some span: how many, how many
// failed, and their latency histogram. The zero value is empty and ready
// to use. Stats is a plain value: it is not safe for concurrent use while
// one goroutine modifies it.
type Stats struct {
	Requests uint64
	Errors   uint64
	Latency  Histogram
	// TTFT is the time to the first streamed token of the requests that
	// had one (a model group's streamed answers); empty otherwise.
	TTFT Histogram
}

// Add adds o to s, as if the requests of o had been recorded in s. A nil o
// adds nothing.
func (s *Stats) Add(o *Stats) {
	if o == nil {
		return
	}
	s.Requests += o.Requests
	s.Errors += o.Errors
	s.Latency.Add(&o.Latency)
	s.TTFT.Add(&o.TTFT)
}

// Reset empties s.
func (s *Stats) Reset() {
	*s = Stats{}
}

// Figures returns what the controller judges of s: the counts, the error
// rate (Errors / Requests) and the p99 latency in seconds
// (Latency.Quantile(0.99)). With no requests the error rate and the p99 are
// 0.
func (s *Stats) Figures() apiv1.CanaryFigures {
	f := apiv1.CanaryFigures{Requests: int64(s.Requests), Errors: int64(s.Errors)}
	if s.Requests == 0 {
		return f
	}
	f.ErrorRate = float64(s.Errors) / float64(s.Requests)
	f.LatencyP99 = s.Latency.Quantile(0.99).Seconds()
	if s.TTFT.Count() > 0 {
		f.TTFTP99 = s.TTFT.Quantile(0.99).Seconds()
	}
	return f
}

// AppendSparse appends s's latency and TTFT histograms to dst as one
// sparse list, the form of a canary_windows row's latency: the latency's
// [bucket, count] pairs, then the TTFT's with their buckets offset by
// Buckets (so that the rows of a window merge bucket by bucket as
// before, and a row without TTFT is what it always was).
func (s *Stats) AppendSparse(dst [][2]uint64) [][2]uint64 {
	dst = s.Latency.AppendSparse(dst)
	for i, c := range s.TTFT {
		if c != 0 {
			dst = append(dst, [2]uint64{uint64(i + Buckets), c})
		}
	}
	return dst
}

// AddSparse adds pairs as encoded by Stats.AppendSparse to s's latency
// and TTFT histograms: buckets below Buckets are latency, those in
// [Buckets, 2*Buckets) TTFT; strictly ascending. Anything else is refused
// and then nothing is added.
func (s *Stats) AddSparse(pairs [][2]uint64) error {
	cut := len(pairs)
	for i, p := range pairs {
		if p[0] >= Buckets {
			cut = i
			break
		}
	}
	ttft := make([][2]uint64, len(pairs)-cut)
	for i, p := range pairs[cut:] {
		ttft[i] = [2]uint64{p[0] - Buckets, p[1]}
	}
	var lat, tt Histogram
	if err := lat.AddSparse(pairs[:cut]); err != nil {
		return err
	}
	if err := tt.AddSparse(ttft); err != nil {
		return fmt.Errorf("ttft: %w", err)
	}
	s.Latency.Add(&lat)
	s.TTFT.Add(&tt)
	return nil
}

// SparseBuckets is the number of bucket indexes of Stats.AppendSparse:
// latency in [0, Buckets), TTFT in [Buckets, SparseBuckets).
const SparseBuckets = 2 * Buckets
