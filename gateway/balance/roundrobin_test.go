package balance

import (
	"slices"
	"testing"
)

func TestRoundRobin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		down  []int
		picks int
		want  []int // picks per endpoint, then the -1 count
	}{
		{name: "even spread", picks: 3000, want: []int{1000, 1000, 1000, 0}},
		{name: "down endpoint is skipped", down: []int{1}, picks: 3000, want: []int{1000, 0, 2000, 0}},
		{name: "last endpoint down wraps", down: []int{2}, picks: 3000, want: []int{2000, 1000, 0, 0}},
		{name: "one left", down: []int{0, 2}, picks: 3000, want: []int{0, 3000, 0, 0}},
		{name: "all down", down: []int{0, 1, 2}, picks: 300, want: []int{0, 0, 0, 300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(3)
			for _, i := range tt.down {
				states[i].SetUp(false)
			}
			b := mustNew(t, "round_robin", addrs, states)
			if got := countPicks(b, 3, tt.picks, nil); !slices.Equal(got, tt.want) {
				t.Errorf("picks per endpoint = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRoundRobinOrder(t *testing.T) {
	t.Parallel()
	addrs, states := pool(4)
	b := mustNew(t, "round_robin", addrs, states)
	var got []int
	for range 8 {
		got = append(got, b.Pick(""))
	}
	if want := []int{0, 1, 2, 3, 0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("picks = %v, want %v", got, want)
	}
}
