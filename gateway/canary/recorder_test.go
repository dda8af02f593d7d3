package canary

import (
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/dwara/dwara/api/apiv1"
)

// observation is the i-th request of goroutine g in the concurrent tests.
func observation(g, i int) (time.Duration, bool) {
	return time.Duration(g*1000+i) * 37 * time.Microsecond, (g+i)%7 == 0
}

// observeAll runs goroutines goroutines, each observing n requests on r,
// and returns the Stats they should add up to.
func observeAll(r *Recorder, goroutines, n, offset int) Stats {
	var want Stats
	for g := range goroutines {
		for i := range n {
			d, failed := observation(g, i+offset)
			want.Requests++
			if failed {
				want.Errors++
			}
			want.Latency.Record(d)
		}
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range n {
				r.Observe(observation(g, i+offset))
			}
		})
	}
	wg.Wait()
	return want
}

func TestRecorderStripes(t *testing.T) {
	r := NewRecorder()
	n := len(r.stripes)
	if n < 1 || n > maxStripes || n&(n-1) != 0 {
		t.Fatalf("%d stripes, want a power of two in [1, %d]", n, maxStripes)
	}
	if uint32(n-1) != r.mask {
		t.Fatalf("mask %d for %d stripes", r.mask, n)
	}
	// The hot counters of neighbouring stripes are at least two cache
	// lines apart.
	if gap := unsafe.Sizeof(stripe{}) - unsafe.Offsetof(stripe{}.latency) - unsafe.Sizeof(stripe{}.latency); gap < 128 {
		t.Fatalf("stripe tail padding %d bytes, want >= 128", gap)
	}
}

func TestRecorderConcurrentDelta(t *testing.T) {
	r := NewRecorder()
	want := observeAll(r, 16, 2000, 0)

	var got Stats
	r.Delta(&got)
	if got.Requests != want.Requests || got.Errors != want.Errors {
		t.Fatalf("Delta: %d requests %d errors, want %d %d", got.Requests, got.Errors, want.Requests, want.Errors)
	}
	if got.Latency != want.Latency {
		t.Fatal("Delta latency histogram differs from the observed durations")
	}

	// A second Delta gives only what came after the first.
	want2 := observeAll(r, 8, 500, 5000)
	var got2 Stats
	r.Delta(&got2)
	if got2.Requests != want2.Requests || got2.Errors != want2.Errors || got2.Latency != want2.Latency {
		t.Fatalf("second Delta: %d requests %d errors, want %d %d (histograms equal: %v)",
			got2.Requests, got2.Errors, want2.Requests, want2.Errors, got2.Latency == want2.Latency)
	}

	// Nothing new: nothing added.
	before := got2
	r.Delta(&got2)
	if got2 != before {
		t.Fatal("Delta with nothing new changed its target")
	}
}

func TestRecorderDeltaDuringObserve(t *testing.T) {
	// Deltas taken while requests are in flight add up to the exact totals.
	r := NewRecorder()
	var sum Stats
	done := make(chan struct{})
	var want Stats
	go func() {
		defer close(done)
		want = observeAll(r, 8, 3000, 0)
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		var d Stats
		r.Delta(&d)
		if sum.Errors+d.Errors > sum.Requests+d.Requests {
			t.Fatalf("cumulative errors %d above requests %d", sum.Errors+d.Errors, sum.Requests+d.Requests)
		}
		sum.Add(&d)
	}
	var last Stats
	r.Delta(&last)
	sum.Add(&last)
	if sum.Requests != want.Requests || sum.Errors != want.Errors || sum.Latency != want.Latency {
		t.Fatalf("summed Deltas: %d requests %d errors, want %d %d", sum.Requests, sum.Errors, want.Requests, want.Errors)
	}
}

func TestRecorderObserveAllocs(t *testing.T) {
	r := NewRecorder()
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		r.Observe(time.Duration(i)*time.Millisecond, i%3 == 0)
	})
	if allocs != 0 {
		t.Fatalf("Observe allocates %v times per call, want 0", allocs)
	}
}

func TestStatsFigures(t *testing.T) {
	var s Stats
	if f := s.Figures(); f != (apiv1.CanaryFigures{}) {
		t.Fatalf("empty Figures = %+v, want zero", f)
	}
	for i := 1; i <= 100; i++ {
		s.Requests++
		if i%20 == 0 {
			s.Errors++
		}
		s.Latency.Record(time.Duration(i) * 10 * time.Millisecond)
	}
	f := s.Figures()
	if f.Requests != 100 || f.Errors != 5 || f.ErrorRate != 0.05 {
		t.Fatalf("Figures = %+v, want 100 requests 5 errors rate 0.05", f)
	}
	// p99 is the 99th value, 990ms, within 1/128.
	if want := BucketValue(BucketOf(990 * time.Millisecond)).Seconds(); f.LatencyP99 != want {
		t.Fatalf("LatencyP99 = %v, want %v", f.LatencyP99, want)
	}
	if math.Abs(f.LatencyP99-0.99) > 0.99/128 {
		t.Fatalf("LatencyP99 = %v, not within 1/128 of 0.99", f.LatencyP99)
	}

	// Requests without latency data: a rate, a zero p99.
	e := Stats{Requests: 4, Errors: 1}
	if f := e.Figures(); f.ErrorRate != 0.25 || f.LatencyP99 != 0 {
		t.Fatalf("Figures = %+v, want rate 0.25 p99 0", f)
	}
}

func TestStatsAddReset(t *testing.T) {
	a := Stats{Requests: 10, Errors: 2}
	a.Latency.Record(time.Millisecond)
	b := Stats{Requests: 5, Errors: 1}
	b.Latency.Record(time.Second)
	a.Add(&b)
	a.Add(nil)
	if a.Requests != 15 || a.Errors != 3 || a.Latency.Count() != 2 ||
		a.Latency[BucketOf(time.Second)] != 1 || a.Latency[BucketOf(time.Millisecond)] != 1 {
		t.Fatalf("Add: %d requests %d errors %d latencies", a.Requests, a.Errors, a.Latency.Count())
	}
	a.Reset()
	if a != (Stats{}) {
		t.Fatal("Reset left data behind")
	}
}

func BenchmarkRecorderObserve(b *testing.B) {
	r := NewRecorder()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		r.Observe(time.Duration(i&1023)*time.Millisecond, i&63 == 0)
	}
}

func BenchmarkRecorderObserveParallel(b *testing.B) {
	r := NewRecorder()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			r.Observe(time.Duration(i&1023)*time.Millisecond, i&63 == 0)
		}
	})
}

func BenchmarkRecorderDelta(b *testing.B) {
	r := NewRecorder()
	for i := range 10000 {
		r.Observe(time.Duration(i)*time.Microsecond, false)
	}
	var s Stats
	b.ReportAllocs()
	for b.Loop() {
		r.Delta(&s)
	}
}
