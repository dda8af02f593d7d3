package balance

import (
	"slices"
	"testing"
)

func TestLeastConn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		inflight []int
		down     []int
		picks    int
		want     []int // picks per endpoint, then the -1 count
	}{
		{name: "fewest in flight wins", inflight: []int{3, 1, 2}, picks: 300, want: []int{0, 300, 0, 0}},
		{name: "idle ties rotate evenly", inflight: []int{0, 0, 0}, picks: 300, want: []int{100, 100, 100, 0}},
		{name: "ties after a busier endpoint share evenly", inflight: []int{1, 0, 0}, picks: 300, want: []int{0, 150, 150, 0}},
		{name: "ties around a busier endpoint share evenly", inflight: []int{2, 5, 2}, picks: 300, want: []int{150, 0, 150, 0}},
		{name: "down endpoint is skipped even when idle", inflight: []int{4, 0, 3}, down: []int{1}, picks: 300, want: []int{0, 0, 300, 0}},
		{name: "all down", inflight: []int{0, 0, 0}, down: []int{0, 1, 2}, picks: 300, want: []int{0, 0, 0, 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(len(tt.inflight))
			for i, n := range tt.inflight {
				for range n {
					states[i].Begin()
				}
			}
			for _, i := range tt.down {
				states[i].SetUp(false)
			}
			b := mustNew(t, "least_conn", addrs, states)
			if got := countPicks(b, len(states), tt.picks, nil); !slices.Equal(got, tt.want) {
				t.Errorf("picks per endpoint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLeastConnFollowsLoad(t *testing.T) {
	t.Parallel()
	// Requests that are started and never finished pile up: least_conn must
	// keep the in-flight counts level.
	addrs, states := pool(4)
	states[2].Begin() // one head start
	b := mustNew(t, "least_conn", addrs, states)
	for range 399 {
		states[b.Pick("")].Begin()
	}
	for i, s := range states {
		if got := s.Inflight(); got != 100 {
			t.Errorf("endpoint %d: Inflight() = %d, want 100", i, got)
		}
	}
}
