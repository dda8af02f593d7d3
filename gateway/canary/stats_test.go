package canary

import (
	"testing"
	"time"
)

// A Stats's TTFT travels with its latency in one sparse list (TTFT
// buckets offset by Buckets), and comes back apart; out-of-range or
// unordered pairs are refused whole.
func TestStatsSparseTTFT(t *testing.T) {
	var s Stats
	s.Latency.Record(200 * time.Millisecond)
	s.Latency.Record(3 * time.Second)
	s.TTFT.Record(50 * time.Millisecond)
	s.TTFT.Record(70 * time.Millisecond)
	pairs := s.AppendSparse(nil)
	var back Stats
	if err := back.AddSparse(pairs); err != nil {
		t.Fatal(err)
	}
	if back.Latency != s.Latency || back.TTFT != s.TTFT {
		t.Fatalf("round trip of %v lost the split of latency and ttft", pairs)
	}
	back.Requests = 2
	if f := back.Figures(); f.TTFTP99 <= 0 || f.TTFTP99 > 0.08 || f.LatencyP99 < 2.9 {
		t.Errorf("figures = %+v", f)
	}
	var none Stats
	none.Requests = 1
	none.Latency.Record(time.Second)
	if f := none.Figures(); f.TTFTP99 != 0 {
		t.Errorf("TTFTP99 without a TTFT = %g, want 0", f.TTFTP99)
	}
	for _, bad := range [][][2]uint64{{{SparseBuckets, 1}}, {{Buckets + 2, 1}, {Buckets + 1, 1}}} {
		var x Stats
		if err := x.AddSparse(bad); err == nil {
			t.Errorf("AddSparse(%v) accepted", bad)
		}
		if x != (Stats{}) {
			t.Errorf("AddSparse(%v) added something", bad)
		}
	}
}

// ObserveTTFT adds to the next Delta's TTFT, not to its requests.
func TestRecorderTTFT(t *testing.T) {
	r := NewRecorder()
	r.Observe(time.Second, false)
	r.ObserveTTFT(100 * time.Millisecond)
	var s Stats
	r.Delta(&s)
	if s.Requests != 1 || s.TTFT.Count() != 1 || s.Latency.Count() != 1 {
		t.Fatalf("delta = requests %d, latency %d, ttft %d; want 1, 1, 1", s.Requests, s.Latency.Count(), s.TTFT.Count())
	}
	var s2 Stats
	r.Delta(&s2)
	if s2.TTFT.Count() != 0 {
		t.Errorf("second delta ttft = %d, want 0", s2.TTFT.Count())
	}
}
