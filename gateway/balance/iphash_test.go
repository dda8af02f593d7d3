package balance

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

// chiSquareCritical3 is the critical value of the chi-square distribution
// with 3 degrees of freedom (4 endpoints) at p = 0.001: a fair hash exceeds
// it once in a thousand key sets.
const chiSquareCritical3 = 16.266

// ringShares returns the fraction of the 64-bit circle each endpoint owns:
// the arcs that end at its points.
func ringShares(r *ring, n int) []float64 {
	shares := make([]float64, n)
	prev := r.hashes[len(r.hashes)-1]
	for i, h := range r.hashes {
		shares[r.owners[i]] += float64(h-prev) / (1 << 64) // h-prev wraps for the first arc
		prev = h
	}
	return shares
}

// keyFamilies are the kinds of affinity keys an ip_hash ring sees. Each
// newKey returns a fresh key sequence, the same on every call.
var keyFamilies = []struct {
	name   string
	newKey func() func(i int) string
}{
	{name: "random client addresses", newKey: func() func(int) string {
		rng := rand.New(rand.NewPCG(1, 2))
		return func(int) string {
			return fmt.Sprintf("%d.%d.%d.%d", rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256))
		}
	}},
	// Neighbouring addresses differ in their last bytes only.
	{name: "consecutive client addresses", newKey: func() func(int) string {
		return func(i int) string { return fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255) }
	}},
	// Sticky handles minted in the same millisecond differ in their last
	// hex digits only: hex(unix ms, 12) + hex(counter, 12).
	{name: "sticky handles", newKey: func() func(int) string {
		return func(i int) string { return fmt.Sprintf("%012x%012x", 1767225600000, i) }
	}},
}

func TestRingSpread(t *testing.T) {
	t.Parallel()
	const keys = 20000
	for _, fam := range keyFamilies {
		t.Run(fam.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(4)
			r := newRing(addrs, states)
			counts := countPicks(r, 4, keys, fam.newKey())
			if counts[4] != 0 {
				t.Fatalf("%d picks returned -1 with every endpoint up", counts[4])
			}
			// Each endpoint's share is the part of the ring it owns: with
			// 160 points per endpoint those parts differ from 1/4 by a few
			// percent (TestRingBalance bounds that), and 20,000 keys would
			// see it. This tests that keys are spread over the ring
			// uniformly and that the lookup follows it.
			shares := ringShares(r, 4)
			var chi2 float64
			for i, share := range shares {
				want := keys * share
				d := float64(counts[i]) - want
				chi2 += d * d / want
			}
			t.Logf("counts %v, ring shares %.4f, chi-square %.2f", counts[:4], shares, chi2)
			if chi2 > chiSquareCritical3 {
				t.Errorf("chi-square = %.2f > %.3f (df 3, p = 0.001): keys are not spread by ring share; counts %v, shares %.4f",
					chi2, chiSquareCritical3, counts[:4], shares)
			}
		})
	}
}

func TestRingBalance(t *testing.T) {
	t.Parallel()
	// An endpoint's share is a sum of 160 random arcs, so it strays from
	// 1/n by about 1/sqrt(160) = 8% of 1/n (one standard deviation). The
	// bound leaves room for the largest of 64 such shares; a point function
	// that clustered its points would blow it.
	const maxDeviation = 0.30
	for _, n := range []int{2, 4, 8, 16, 64} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(n)
			r := newRing(addrs, states)
			if got, want := len(r.hashes), n*ringPointsPerEndpoint; got != want {
				t.Fatalf("ring has %d points, want %d", got, want)
			}
			for i, share := range ringShares(r, n) {
				if dev := share*float64(n) - 1; dev > maxDeviation || dev < -maxDeviation {
					t.Errorf("endpoint %d owns %.4f of the ring, %+.0f%% off its fair share %.4f", i, share, dev*100, 1/float64(n))
				}
			}
		})
	}
}

func TestRingSameKeySameEndpoint(t *testing.T) {
	t.Parallel()
	addrs, states := pool(5)
	b := mustNew(t, "ip_hash", addrs, states)
	again := mustNew(t, "ip_hash", addrs, states)
	// The ring depends on the addresses, not on their order in the spec.
	reversed := make([]string, len(addrs))
	reversedStates := make([]*State, len(addrs))
	for i := range addrs {
		reversed[len(addrs)-1-i] = addrs[i]
		reversedStates[len(addrs)-1-i] = states[i]
	}
	other := mustNew(t, "ip_hash", reversed, reversedStates)
	seen := map[int]bool{}
	for i := range 2000 {
		key := fmt.Sprintf("192.0.2.%d:%d", i%256, i)
		first := b.Pick(key)
		seen[first] = true
		for range 3 {
			if got := b.Pick(key); got != first {
				t.Fatalf("key %q: Pick = %d then %d", key, first, got)
			}
		}
		if got := again.Pick(key); got != first {
			t.Fatalf("key %q: a second ring over the same endpoints picks %d, the first %d", key, got, first)
		}
		if got := reversed[other.Pick(key)]; got != addrs[first] {
			t.Fatalf("key %q: the ring over the reversed endpoints picks %s, the first %s", key, got, addrs[first])
		}
	}
	if len(seen) != len(addrs) {
		t.Errorf("2000 keys reached %d of %d endpoints", len(seen), len(addrs))
	}
	if got, want := b.Pick(""), b.Pick(""); got != want || got < 0 {
		t.Errorf("empty key: Pick = %d then %d", want, got)
	}
}

func TestRingRemoveEndpoint(t *testing.T) {
	t.Parallel()
	const keys = 20000
	for removed := range 4 {
		t.Run(fmt.Sprint(removed), func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(4)
			before := mustNew(t, "ip_hash", addrs, states)
			var keptAddrs []string
			var keptStates []*State
			for i := range addrs {
				if i != removed {
					keptAddrs = append(keptAddrs, addrs[i])
					keptStates = append(keptStates, states[i])
				}
			}
			after := mustNew(t, "ip_hash", keptAddrs, keptStates)
			onRemoved, moved := 0, 0
			for i := range keys {
				key := fmt.Sprintf("key-%d", i)
				was, is := addrs[before.Pick(key)], keptAddrs[after.Pick(key)]
				if was == addrs[removed] {
					onRemoved++
				}
				if was != is {
					moved++
					if was != addrs[removed] {
						t.Fatalf("key %q moved from %s to %s though %s was removed", key, was, is, addrs[removed])
					}
				}
			}
			if moved != onRemoved {
				t.Errorf("%d keys moved, want exactly the %d that were on the removed endpoint", moved, onRemoved)
			}
			if onRemoved < keys/8 || onRemoved > keys*3/8 {
				t.Errorf("%d of %d keys were on the removed endpoint, want about a quarter", onRemoved, keys)
			}
		})
	}
}

func TestRingDownEndpoint(t *testing.T) {
	t.Parallel()
	const keys = 20000
	for down := range 4 {
		t.Run(fmt.Sprint(down), func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(4)
			b := mustNew(t, "ip_hash", addrs, states)
			want := make([]int, keys)
			for i := range keys {
				want[i] = b.Pick(fmt.Sprintf("key-%d", i))
			}
			// With an endpoint down its keys go where they would go if it
			// were removed from the ring; every other key stays.
			var others []string
			var otherStates []*State
			for i := range addrs {
				if i != down {
					others = append(others, addrs[i])
					otherStates = append(otherStates, states[i])
				}
			}
			without := mustNew(t, "ip_hash", others, otherStates)
			states[down].SetUp(false)
			movedKeys := 0
			for i := range keys {
				key := fmt.Sprintf("key-%d", i)
				got := b.Pick(key)
				switch {
				case got < 0 || got == down:
					t.Fatalf("key %q: Pick = %d with endpoint %d down", key, got, down)
				case want[i] == down:
					movedKeys++
					if addrs[got] != others[without.Pick(key)] {
						t.Fatalf("key %q went to %s, the ring without %s sends it to %s", key, addrs[got], addrs[down], others[without.Pick(key)])
					}
				case got != want[i]:
					t.Fatalf("key %q moved from %d to %d though only %d went down", key, want[i], got, down)
				}
			}
			if movedKeys == 0 {
				t.Fatal("no key was on the down endpoint")
			}
			// Back up: every key returns.
			states[down].SetUp(true)
			for i := range keys {
				if got := b.Pick(fmt.Sprintf("key-%d", i)); got != want[i] {
					t.Fatalf("key-%d: Pick = %d after recovery, want %d", i, got, want[i])
				}
			}
		})
	}
}

func TestRingHash(t *testing.T) {
	t.Parallel()
	// FNV-1a 64 of the bytes, then fmix64; the first values are the
	// published FNV-1a test vectors run through fmix64 by hand.
	fmix := func(h uint64) uint64 {
		h ^= h >> 33
		h *= 0xff51afd7ed558ccd
		h ^= h >> 33
		h *= 0xc4ceb9fe1a85ec53
		h ^= h >> 33
		return h
	}
	tests := []struct {
		in   string
		fnv1 uint64
	}{
		{in: "", fnv1: 0xcbf29ce484222325},
		{in: "a", fnv1: 0xaf63dc4c8601ec8c},
		{in: "foobar", fnv1: 0x85944171f73967e8},
	}
	for _, tt := range tests {
		if got, want := ringHash(tt.in), fmix(tt.fnv1); got != want {
			t.Errorf("ringHash(%q) = %#x, want %#x", tt.in, got, want)
		}
		if got, want := ringHash([]byte(tt.in)), ringHash(tt.in); got != want {
			t.Errorf("ringHash([]byte(%q)) = %#x, ringHash(string) = %#x", tt.in, got, want)
		}
	}
}

// ringMapping picks every key of keys and returns the endpoint of each.
func ringMapping(b Balancer, keys []string) []int {
	m := make([]int, len(keys))
	for i, k := range keys {
		m[i] = b.Pick(k)
	}
	return m
}

func TestRingDownEndpointsMoveOnlyTheirKeys(t *testing.T) {
	t.Parallel()
	const n = 5
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("198.51.%d.%d:%d", i/256%256, i%256, i)
	}
	tests := []struct {
		name string
		down []int // marked down in this order, brought back in reverse
	}{
		{name: "one", down: []int{2}},
		{name: "two", down: []int{0, 3}},
		{name: "all but one", down: []int{4, 1, 0, 3}},
		{name: "all", down: []int{1, 4, 2, 0, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs, states := pool(n)
			b := mustNew(t, "ip_hash", addrs, states)
			before := ringMapping(b, keys)
			// while[k] is the mapping with the first k endpoints of tt.down
			// down; while[0] is before.
			while := [][]int{before}
			isDown := make([]bool, n)
			for step, d := range tt.down {
				prev := while[len(while)-1]
				states[d].SetUp(false)
				isDown[d] = true
				got := ringMapping(b, keys)
				// The ring without the down endpoints is where their keys
				// should go.
				var upAddrs []string
				var upStates []*State
				for i := range addrs {
					if !isDown[i] {
						upAddrs = append(upAddrs, addrs[i])
						upStates = append(upStates, states[i])
					}
				}
				var without Balancer
				if len(upAddrs) > 0 {
					without = mustNew(t, "ip_hash", upAddrs, upStates)
				}
				moved := 0
				for i, key := range keys {
					if got[i] != prev[i] {
						moved++
						if prev[i] != d {
							t.Fatalf("step %d: key %q moved from %d to %d though only %d went down", step, key, prev[i], got[i], d)
						}
					}
					switch {
					case without == nil:
						if got[i] != -1 {
							t.Fatalf("step %d: key %q: Pick = %d with every endpoint down, want -1", step, key, got[i])
						}
					case got[i] < 0 || isDown[got[i]]:
						t.Fatalf("step %d: key %q: Pick = %d, down %v", step, key, got[i], isDown)
					case !isDown[before[i]] && got[i] != before[i]:
						t.Fatalf("step %d: key %q moved from %d to %d though its endpoint is up", step, key, before[i], got[i])
					case isDown[before[i]]:
						if want := upAddrs[without.Pick(key)]; addrs[got[i]] != want {
							t.Fatalf("step %d: key %q went to %s, the ring without the down endpoints sends it to %s", step, key, addrs[got[i]], want)
						}
					}
				}
				onDown := 0
				for i := range keys {
					if prev[i] == d {
						onDown++
					}
				}
				if onDown == 0 || moved != onDown {
					t.Errorf("step %d (%d down): %d keys moved, want exactly the %d on it (and some)", step, d, moved, onDown)
				}
				while = append(while, got)
			}
			// Recovery in reverse order: each step gives back exactly the
			// mapping the ring had before that endpoint went down.
			for step := len(tt.down) - 1; step >= 0; step-- {
				states[tt.down[step]].SetUp(true)
				got := ringMapping(b, keys)
				for i, key := range keys {
					if got[i] != while[step][i] {
						t.Fatalf("%d back up: key %q on %d, want %d as before it went down", tt.down[step], key, got[i], while[step][i])
					}
				}
			}
		})
	}
}

func TestRingPickWhileEndpointsFlap(t *testing.T) {
	t.Parallel()
	// Endpoints go down and up while picks walk the ring: every walk ends
	// within one turn, with an endpoint index or -1.
	addrs, states := pool(4)
	b := mustNew(t, "ip_hash", addrs, states)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			states[i%4].SetUp(i/4%3 == 0)
		}
	})
	for i := range 200000 {
		if got := b.Pick(fmt.Sprint(i)); got < -1 || got >= len(addrs) {
			close(stop)
			wg.Wait()
			t.Fatalf("Pick = %d, want -1..%d", got, len(addrs)-1)
		}
	}
	close(stop)
	wg.Wait()
}

func TestRingWalkZeroAllocs(t *testing.T) {
	// Not parallel: AllocsPerRun counts the allocations of the whole process.
	// One endpoint of 64 up: most keys walk far around the ring.
	addrs, states := pool(64)
	b := mustNew(t, "ip_hash", addrs, states)
	for _, s := range states[1:] {
		s.SetUp(false)
	}
	keys := []string{"", "10.0.0.1", "203.0.113.77", "0197a3c2b4d8000000000001"}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if b.Pick(keys[i%len(keys)]) != 0 {
			panic("the walk missed the one endpoint up")
		}
		i++
	})
	if allocs != 0 {
		t.Errorf("a walking Pick allocates %v times per call, want 0", allocs)
	}
}
