package canary

import "github.com/dwara/dwara/api/apiv1"

// Stats is one version's requests over some span: how many, how many
// failed, and their latency histogram. The zero value is empty and ready
// to use. Stats is a plain value: it is not safe for concurrent use while
// one goroutine modifies it.
type Stats struct {
	Requests uint64
	Errors   uint64
	Latency  Histogram
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
	return f
}
