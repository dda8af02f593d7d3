package balance

import (
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestStateZeroValue(t *testing.T) {
	t.Parallel()
	var s State
	if !s.Up() {
		t.Error("zero State is down, want up")
	}
	if got := s.Inflight(); got != 0 {
		t.Errorf("Inflight() = %d, want 0", got)
	}
	if got := s.EWMA(); got != 0 {
		t.Errorf("EWMA() = %v, want 0", got)
	}
}

func TestStateSize(t *testing.T) {
	t.Parallel()
	// One cache line, so that the in-flight counters of two endpoints never
	// share one.
	if got := unsafe.Sizeof(State{}); got != 64 {
		t.Errorf("sizeof State = %d, want 64", got)
	}
}

func TestStateSetUp(t *testing.T) {
	t.Parallel()
	steps := []struct {
		up          bool
		wantChanged bool
	}{
		{up: true, wantChanged: false}, // a new State is up
		{up: false, wantChanged: true},
		{up: false, wantChanged: false},
		{up: true, wantChanged: true},
		{up: true, wantChanged: false},
	}
	var s State
	for i, step := range steps {
		if got := s.SetUp(step.up); got != step.wantChanged {
			t.Errorf("step %d: SetUp(%v) changed = %v, want %v", i, step.up, got, step.wantChanged)
		}
		if got := s.Up(); got != step.up {
			t.Errorf("step %d: Up() = %v after SetUp(%v)", i, got, step.up)
		}
	}
}

func TestStateBeginDone(t *testing.T) {
	t.Parallel()
	var s State
	a := s.Begin()
	b := s.Begin()
	if got := s.Inflight(); got != 2 {
		t.Fatalf("Inflight() = %d after two Begin, want 2", got)
	}
	s.Done(a, false)
	if got := s.Inflight(); got != 1 {
		t.Fatalf("Inflight() = %d after one Done, want 1", got)
	}
	s.Done(b, false)
	if got := s.Inflight(); got != 0 {
		t.Fatalf("Inflight() = %d after both Done, want 0", got)
	}
	if got := s.EWMA(); got <= 0 {
		t.Errorf("EWMA() = %v after two samples, want > 0", got)
	}
}

func TestStateDoneLatency(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		latency  time.Duration
		failed   bool
		min, max time.Duration
	}{
		// The bounds leave room for a loaded machine: a stall between Begin
		// and Done only adds to the measured latency, and a stall between
		// Done and EWMA decays the estimate (time constant 10 s), so the
		// lower bounds are half the expected value and the upper ones 10 s
		// above it. They still tell the three cases apart.
		{name: "success", latency: 300 * time.Millisecond, min: 150 * time.Millisecond, max: 10*time.Second + 300*time.Millisecond},
		{name: "fast failure counts as one second", latency: 0, failed: true, min: 500 * time.Millisecond, max: 11 * time.Second},
		{name: "slow failure keeps its latency", latency: 3 * time.Second, failed: true, min: 1500 * time.Millisecond, max: 13 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			s.Done(s.Begin().Add(-tt.latency), tt.failed)
			if got := s.EWMA(); got < tt.min || got > tt.max {
				t.Errorf("EWMA() = %v, want in [%v, %v]", got, tt.min, tt.max)
			}
		})
	}
}

func TestStateObserve(t *testing.T) {
	t.Parallel()
	const (
		ms  = float64(time.Millisecond)
		sec = int64(time.Second)
	)
	e1 := math.Exp(-1) // weight left after one time constant (10s)
	type sample struct {
		rtt float64
		at  int64
	}
	tests := []struct {
		name    string
		samples []sample
		at      int64 // when the estimate is read
		want    float64
	}{
		{name: "no sample", at: sec, want: 0},
		{name: "first sample is taken as is", samples: []sample{{100 * ms, sec}}, at: sec, want: 100 * ms},
		{name: "a peak replaces the estimate at once", samples: []sample{{10 * ms, sec}, {200 * ms, sec + 1}}, at: sec + 1, want: 200 * ms},
		{name: "a lower sample at the same instant has no weight", samples: []sample{{100 * ms, sec}, {10 * ms, sec}}, at: sec, want: 100 * ms},
		{
			name:    "a lower sample is averaged in by elapsed time",
			samples: []sample{{100 * ms, sec}, {10 * ms, 11 * sec}},
			at:      11 * sec,
			want:    100*ms*e1 + 10*ms*(1-e1),
		},
		{
			name:    "a sample above the decayed estimate is a peak",
			samples: []sample{{100 * ms, sec}, {50 * ms, 11 * sec}}, // decayed: 36.8ms
			at:      11 * sec,
			want:    50 * ms,
		},
		{name: "the estimate decays while idle", samples: []sample{{100 * ms, sec}}, at: 11 * sec, want: 100 * ms * e1},
		{name: "a stale estimate is forgotten", samples: []sample{{100 * ms, sec}}, at: 1000 * sec, want: 100 * ms * math.Exp(-99.9)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var s State
			for _, x := range tt.samples {
				s.observe(x.rtt, x.at)
			}
			got := s.estimate(tt.at)
			if math.Abs(got-tt.want) > 1e-9*tt.want {
				t.Errorf("estimate = %v ns, want %v ns", got, tt.want)
			}
		})
	}
}

func TestStateConcurrent(t *testing.T) {
	t.Parallel()
	var s State
	const workers, rounds = 8, 1000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				start := s.Begin()
				_ = s.Up()
				_ = s.EWMA()
				s.Done(start, (w+i)%7 == 0)
				if i%100 == 0 {
					s.SetUp(w%2 == 0)
				}
			}
		})
	}
	wg.Wait()
	if got := s.Inflight(); got != 0 {
		t.Errorf("Inflight() = %d after every Done, want 0", got)
	}
	if got := s.EWMA(); got < 500*time.Millisecond { // about a second, less any decay on a loaded machine
		t.Errorf("EWMA() = %v after failed requests, want about a second", got)
	}
}
