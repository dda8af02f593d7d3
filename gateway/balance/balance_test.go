package balance

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dwara/dwara/gateway/config"
)

// kinds lists every balancer name New accepts besides "".
var kinds = []string{config.BalancerRoundRobin, config.BalancerLeastConn, config.BalancerIPHash, config.BalancerPeakEWMA}

// pool returns n endpoint addresses and fresh States for them.
func pool(n int) ([]string, []*State) {
	addrs := make([]string, n)
	states := make([]*State, n)
	for i := range n {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", 9001+i)
		states[i] = new(State)
	}
	return addrs, states
}

// mustNew builds a balancer or fails the test.
func mustNew(t testing.TB, kind string, addrs []string, states []*State) Balancer {
	t.Helper()
	b, err := New(kind, addrs, states)
	if err != nil {
		t.Fatalf("New(%q): %v", kind, err)
	}
	return b
}

// countPicks picks n times with the keys key(i) and counts the picks per
// endpoint; index len(counts)-1 counts -1.
func countPicks(b Balancer, endpoints, n int, key func(i int) string) []int {
	counts := make([]int, endpoints+1)
	for i := range n {
		k := ""
		if key != nil {
			k = key(i)
		}
		idx := b.Pick(k)
		if idx < 0 {
			idx = endpoints
		}
		counts[idx]++
	}
	return counts
}

func TestNew(t *testing.T) {
	t.Parallel()
	addrs, states := pool(3)
	tests := []struct {
		name    string
		kind    string
		addrs   []string
		states  []*State
		want    string // the concrete type, "" when an error is expected
		wantErr error
	}{
		{name: "default", kind: "", addrs: addrs, states: states, want: "*balance.roundRobin"},
		{name: "round_robin", kind: config.BalancerRoundRobin, addrs: addrs, states: states, want: "*balance.roundRobin"},
		{name: "least_conn", kind: config.BalancerLeastConn, addrs: addrs, states: states, want: "*balance.leastConn"},
		{name: "ip_hash", kind: config.BalancerIPHash, addrs: addrs, states: states, want: "*balance.ring"},
		{name: "peak_ewma", kind: config.BalancerPeakEWMA, addrs: addrs, states: states, want: "*balance.peakEWMA"},
		{name: "unknown", kind: "random", addrs: addrs, states: states, wantErr: ErrUnknownBalancer},
		{name: "wrong case", kind: "Round_Robin", addrs: addrs, states: states, wantErr: ErrUnknownBalancer},
		{name: "no endpoints", kind: "", addrs: nil, states: nil},
		{name: "length mismatch", kind: "", addrs: addrs, states: states[:2]},
		{name: "nil state", kind: "", addrs: addrs[:2], states: []*State{states[0], nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := New(tt.kind, tt.addrs, tt.states)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("New succeeded with %T, want an error", b)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("New error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if got := fmt.Sprintf("%T", b); got != tt.want {
				t.Errorf("New built %s, want %s", got, tt.want)
			}
		})
	}
}

func TestNewCopiesStates(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(2)
			b := mustNew(t, kind, addrs, states)
			down := new(State)
			down.SetUp(false)
			states[0], states[1] = down, down // must not reach the balancer
			if got := b.Pick("k"); got < 0 {
				t.Errorf("Pick = %d after the caller reused its slice, want an endpoint", got)
			}
		})
	}
}

func TestPickAllDown(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		for _, n := range []int{1, 2, 5} {
			t.Run(fmt.Sprintf("%s/%d", kind, n), func(t *testing.T) {
				t.Parallel()
				addrs, states := pool(n)
				b := mustNew(t, kind, addrs, states)
				for _, s := range states {
					s.SetUp(false)
				}
				for i := range 100 {
					if got := b.Pick(fmt.Sprint(i)); got != -1 {
						t.Fatalf("Pick = %d with every endpoint down, want -1", got)
					}
				}
				// One endpoint back: every pick goes to it.
				states[n-1].SetUp(true)
				for i := range 100 {
					if got := b.Pick(fmt.Sprint(i)); got != n-1 {
						t.Fatalf("Pick = %d with only endpoint %d up", got, n-1)
					}
				}
			})
		}
	}
}

func TestPickZeroAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts the allocations of the whole process.
	for _, kind := range kinds {
		for _, down := range []string{"all up", "some down", "all down"} {
			t.Run(kind+"/"+down, func(t *testing.T) {
				addrs, states := pool(8)
				b := mustNew(t, kind, addrs, states)
				switch down {
				case "some down":
					for i := 0; i < 8; i += 2 {
						states[i].SetUp(false)
					}
				case "all down":
					for _, s := range states {
						s.SetUp(false)
					}
				}
				// Give peak_ewma something to compare.
				for i, s := range states {
					s.observe(float64(i+1)*1e6, monotonic())
				}
				keys := []string{"", "10.0.0.1", "203.0.113.77", "0197a3c2b4d8000000000001"}
				i := 0
				allocs := testing.AllocsPerRun(1000, func() {
					b.Pick(keys[i%len(keys)])
					i++
				})
				if allocs != 0 {
					t.Errorf("Pick allocates %v times per call, want 0", allocs)
				}
			})
		}
	}
}

func TestPickConcurrent(t *testing.T) {
	t.Parallel()
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const n, workers, picks = 5, 8, 2000
			addrs, states := pool(n)
			b := mustNew(t, kind, addrs, states)
			stop := make(chan struct{})
			flipped := make(chan struct{})
			go func() { // a health checker flapping one endpoint
				defer close(flipped)
				for i := 0; ; i++ {
					select {
					case <-stop:
						states[0].SetUp(true)
						return
					default:
						states[0].SetUp(i%2 == 0)
					}
				}
			}()
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Go(func() {
					for i := range picks {
						idx := b.Pick(fmt.Sprintf("10.1.%d.%d", w, i%256))
						if idx < 0 || idx >= n {
							errs <- fmt.Errorf("Pick = %d, want an endpoint of %d (one flaps, the rest are up)", idx, n)
							return
						}
						start := states[idx].Begin()
						states[idx].Done(start, i%10 == 0)
					}
				})
			}
			wg.Wait()
			close(stop)
			<-flipped
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for i, s := range states {
				if got := s.Inflight(); got != 0 {
					t.Errorf("endpoint %d: Inflight() = %d after every Done", i, got)
				}
			}
		})
	}
}

func BenchmarkPick(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("198.51.%d.%d", i/256, i%256)
	}
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			addrs, states := pool(8)
			bal := mustNew(b, kind, addrs, states)
			for i, s := range states {
				s.observe(float64(i+1)*1e6, monotonic())
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				bal.Pick(keys[i&(len(keys)-1)])
				i++
			}
		})
	}
}

func BenchmarkPickParallel(b *testing.B) {
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			addrs, states := pool(8)
			bal := mustNew(b, kind, addrs, states)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bal.Pick("203.0.113.9")
				}
			})
		})
	}
}
