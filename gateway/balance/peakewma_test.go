package balance

import (
	"slices"
	"testing"
	"time"
)

// feed records n finished requests of the given latency on s.
func feed(s *State, latency time.Duration, n int) {
	for range n {
		s.Done(s.Begin().Add(-latency), false)
	}
}

func TestPeakEWMASlowEndpoint(t *testing.T) {
	t.Parallel()
	const picks = 10000
	tests := []struct {
		name      string
		latencies []time.Duration
		slow      int
		maxShare  float64 // of the slow endpoint, over all picks
	}{
		// Two endpoints are always the two choices: the fast one always wins.
		{name: "two endpoints", latencies: []time.Duration{500 * time.Millisecond, 5 * time.Millisecond}, slow: 0, maxShare: 0},
		// Two distinct endpoints are drawn, and the slow one loses to any
		// fast one.
		{name: "one slow of four", latencies: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond, 400 * time.Millisecond, 5 * time.Millisecond}, slow: 2, maxShare: 0},
		{name: "a failing endpoint looks slow", latencies: []time.Duration{-1, 20 * time.Millisecond, 20 * time.Millisecond}, slow: 0, maxShare: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(len(tt.latencies))
			for i, l := range tt.latencies {
				if l < 0 {
					states[i].Done(states[i].Begin(), true) // fails fast
					continue
				}
				feed(states[i], l, 20)
			}
			b := mustNew(t, "peak_ewma", addrs, states)
			counts := countPicks(b, len(states), picks, nil)
			t.Logf("picks per endpoint %v", counts)
			if share := float64(counts[tt.slow]) / picks; share > tt.maxShare {
				t.Errorf("slow endpoint %d got %.1f%% of the picks, want at most %.1f%%: %v", tt.slow, share*100, tt.maxShare*100, counts)
			}
			for i, c := range counts[:len(states)] {
				if i != tt.slow && c < picks/(2*len(states)) {
					t.Errorf("fast endpoint %d got %d of %d picks, want a share of the rest: %v", i, c, picks, counts)
				}
			}
		})
	}
}

func TestPeakEWMAWeighsInflight(t *testing.T) {
	t.Parallel()
	// Same latency; endpoint 0 already has 9 requests in flight, so its cost
	// is ten times the others' and it loses every draw it is in.
	addrs, states := pool(3)
	for _, s := range states {
		feed(s, 10*time.Millisecond, 5)
	}
	for range 9 {
		states[0].Begin()
	}
	b := mustNew(t, "peak_ewma", addrs, states)
	counts := countPicks(b, 3, 3000, nil)
	// Endpoints 1 and 2 each win at least their draws against endpoint 0,
	// a third of all draws.
	if counts[0] != 0 || counts[1] < 800 || counts[2] < 800 {
		t.Errorf("picks per endpoint = %v, want none for the busy endpoint 0 and at least a third each for the others", counts)
	}
}

func TestPeakEWMANewEndpointsGetTraffic(t *testing.T) {
	t.Parallel()
	// No samples anywhere: every endpoint costs the default and each wins
	// its share of the draws (ties go to the first drawn, a random one).
	addrs, states := pool(4)
	b := mustNew(t, "peak_ewma", addrs, states)
	counts := countPicks(b, 4, 8000, nil)
	for i, c := range counts[:4] {
		if c < 1500 || c > 2500 {
			t.Errorf("endpoint %d got %d of 8000 picks, want about 2000: %v", i, c, counts)
		}
	}
	// A fresh endpoint next to measured slow ones is preferred.
	feed(states[0], 50*time.Millisecond, 3)
	feed(states[1], 50*time.Millisecond, 3)
	feed(states[2], 50*time.Millisecond, 3)
	counts = countPicks(b, 4, 3000, nil)
	if counts[3] < 1000 {
		t.Errorf("fresh endpoint 3 got %d of 3000 picks next to 50ms endpoints: %v", counts[3], counts)
	}
}

func TestPeakEWMAIdleEndpointRecovers(t *testing.T) {
	t.Parallel()
	addrs, states := pool(2)
	feed(states[0], 2*time.Millisecond, 5)
	feed(states[1], 800*time.Millisecond, 5)
	b := mustNew(t, "peak_ewma", addrs, states)
	if got := countPicks(b, 2, 100, nil); got[1] != 0 {
		t.Fatalf("slow endpoint got %d of 100 picks just after its samples", got[1])
	}
	// Pretend its last sample was 100s (ten time constants) ago: the
	// estimate has decayed to 0.04ms, below the fast endpoint's.
	states[1].stamp.Add(-int64(100 * time.Second))
	if got := countPicks(b, 2, 100, nil); got[1] != 100 {
		t.Errorf("idle slow endpoint got %d of 100 picks, want all: its estimate %v should have decayed", got[1], states[1].EWMA())
	}
}

func TestPeakEWMADown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
		down []int
		want []int // endpoints that may be picked; empty means -1
	}{
		{name: "single up", n: 1, want: []int{0}},
		{name: "single down", n: 1, down: []int{0}},
		{name: "one down of two", n: 2, down: []int{1}, want: []int{0}},
		{name: "two down of three", n: 3, down: []int{0, 2}, want: []int{1}},
		{name: "half down", n: 6, down: []int{0, 2, 4}, want: []int{1, 3, 5}},
		{name: "all down", n: 4, down: []int{0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(tt.n)
			for _, i := range tt.down {
				states[i].SetUp(false)
			}
			b := mustNew(t, "peak_ewma", addrs, states)
			seen := map[int]bool{}
			for range 1000 {
				got := b.Pick("")
				if len(tt.want) == 0 {
					if got != -1 {
						t.Fatalf("Pick = %d, want -1", got)
					}
					continue
				}
				if !slices.Contains(tt.want, got) {
					t.Fatalf("Pick = %d, want one of %v", got, tt.want)
				}
				seen[got] = true
			}
			if len(seen) != len(tt.want) {
				t.Errorf("picked %d distinct endpoints, want all %d up ones", len(seen), len(tt.want))
			}
		})
	}
}
