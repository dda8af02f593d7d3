package split

import (
	"encoding/hex"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"sync"
	"testing"
)

// Chi-square critical values at p = 0.001 by degrees of freedom.
var chi2Critical001 = map[int]float64{1: 10.828, 2: 13.816, 3: 16.266, 4: 18.467, 5: 20.515, 6: 22.458, 7: 24.322}

// ChiSquare returns Pearson's statistic of observed counts against the
// expected shares implied by weights.
func ChiSquare(observed []int, weights []int) float64 {
	var n, tw float64
	for i := range observed {
		n += float64(observed[i])
		tw += float64(weights[i])
	}
	var chi float64
	for i := range observed {
		exp := n * float64(weights[i]) / tw
		if exp == 0 {
			if observed[i] != 0 {
				return math.Inf(1)
			}
			continue
		}
		d := float64(observed[i]) - exp
		chi += d * d / exp
	}
	return chi
}

// testKeys returns n random request-id-like keys from a fixed seed.
func testKeys(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	keys := make([]string, n)
	var b [16]byte
	for i := range keys {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys[i] = hex.EncodeToString(b[:])
	}
	return keys
}

func TestPickRatiosChiSquare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights []int
	}{
		{"95/5", []int{95, 5}},
		{"50/50", []int{50, 50}},
		{"1/99", []int{1, 99}},
		{"4-way 40/30/20/10", []int{40, 30, 20, 10}},
		{"with a zero 70/0/30", []int{70, 0, 30}},
	}
	keys := testKeys(40000, 1)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := New(tt.weights)
			if err != nil {
				t.Fatal(err)
			}
			counts := make([]int, len(tt.weights))
			for _, k := range keys {
				counts[s.Pick(k)]++
			}
			df := -1
			for i, w := range tt.weights {
				if w == 0 && counts[i] != 0 {
					t.Fatalf("weight-0 target %d picked %d times", i, counts[i])
				}
				if w > 0 {
					df++
				}
			}
			chi := ChiSquare(counts, tt.weights)
			if crit := chi2Critical001[df]; chi > crit {
				t.Errorf("counts %v for weights %v: chi-square %.2f > %.3f (df %d, p = 0.001)", counts, tt.weights, chi, crit, df)
			}
		})
	}
}

func TestPickDeterministic(t *testing.T) {
	t.Parallel()
	s, _ := New([]int{3, 4, 5})
	for _, k := range testKeys(1000, 2) {
		if s.Pick(k) != s.Pick(k) {
			t.Fatalf("key %q picked two ways", k)
		}
	}
	// FNV-1a 64 reference values.
	if got := Hash(""); got != 0xcbf29ce484222325 {
		t.Errorf("Hash(\"\") = %#x", got)
	}
	if got := Hash("a"); got != 0xaf63dc4c8601ec8c {
		t.Errorf("Hash(\"a\") = %#x", got)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, w := range [][]int{nil, {}, {0, 0}, {1, -1}, {1, 1, 1, 1, 1, 1, 1, 1, 1}} {
		if _, err := New(w); err == nil {
			t.Errorf("New(%v) accepted", w)
		}
	}
}

// moved counts keys whose pick differs between two splits, and how many of
// them moved from target `from` to target `to`.
func moved(keys []string, a, b *Split, from, to int) (n, directed int) {
	for _, k := range keys {
		pa, pb := a.Pick(k), b.Pick(k)
		if pa != pb {
			n++
			if pa == from && pb == to {
				directed++
			}
		}
	}
	return n, directed
}

func TestDisplacementOverKeys(t *testing.T) {
	t.Parallel()
	keys := testKeys(100000, 3)
	mk := func(w ...int) *Split {
		s, err := New(w)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	t.Run("95/5 to 90/10 moves 5% stable->canary", func(t *testing.T) {
		n, directed := moved(keys, mk(95, 5), mk(90, 10), 0, 1)
		share := float64(n) / float64(len(keys))
		if math.Abs(share-0.05) > 0.005 {
			t.Errorf("moved share %.4f, want 0.05 ± 0.005", share)
		}
		if directed != n {
			t.Errorf("%d of %d moved keys went stable->canary, want all", directed, n)
		}
	})
	t.Run("100/0 to 0/100 moves all", func(t *testing.T) {
		n, _ := moved(keys, mk(100, 0), mk(0, 100), 0, 1)
		if n != len(keys) {
			t.Errorf("moved %d of %d keys", n, len(keys))
		}
	})
	t.Run("95/5 to 95/10 reshuffles", func(t *testing.T) {
		n, _ := moved(keys, mk(95, 5), mk(95, 10), 0, 1)
		share := float64(n) / float64(len(keys))
		if share < 0.10 {
			t.Errorf("moved share %.4f, want far more than 0.05 (a total change reshuffles)", share)
		}
		want := Displacement([]Branch{{"s", 95}, {"c", 5}}, []Branch{{"s", 95}, {"c", 10}})
		if math.Abs(share-want) > 0.005 {
			t.Errorf("measured share %.4f, Displacement says %.4f", share, want)
		}
	})
}

func TestDisplacement(t *testing.T) {
	t.Parallel()
	b := func(kv ...any) []Branch {
		var out []Branch
		for i := 0; i < len(kv); i += 2 {
			out = append(out, Branch{kv[i].(string), kv[i+1].(int)})
		}
		return out
	}
	tests := []struct {
		name string
		a, b []Branch
		want float64
	}{
		{"unchanged", b("s", 95, "c", 5), b("s", 95, "c", 5), 0},
		{"ramp 95/5 to 90/10", b("s", 95, "c", 5), b("s", 90, "c", 10), 0.05},
		{"flip 100/0 to 0/100", b("s", 100, "c", 0), b("s", 0, "c", 100), 1},
		{"flip 90/10 to 10/90", b("s", 90, "c", 10), b("s", 10, "c", 90), 0.8},
		{"single upstream to same", b("s", 1), b("s", 1), 0},
		{"single upstream to another", b("s", 1), b("c", 1), 1},
		{"4-way shift", b("a", 25, "b", 25, "c", 25, "d", 25), b("a", 25, "b", 25, "c", 50, "d", 0), 0.25},
		{"zero-weight target in the middle", b("a", 50, "z", 0, "b", 50), b("a", 50, "b", 50), 0},
		{"total change 1/1 to 1/2", b("s", 1, "c", 1), b("s", 1, "c", 2), 0.5}, // residues mod lcm 6: 2, 3, 4 move
		{"empty to something", nil, b("s", 1), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Displacement(tt.a, tt.b); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Displacement = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("large totals use the key sample", func(t *testing.T) {
		t.Parallel()
		// Totals 999,999 and 1,000,002 have an lcm far past the exact limit;
		// two near-even halves of unrelated totals move about half the keys.
		got := Displacement(b("s", 500000, "c", 499999), b("s", 500001, "c", 500001))
		if math.Abs(got-0.5) > 0.01 {
			t.Errorf("Displacement across large totals = %v, want 0.5 ± 0.01", got)
		}
	})
}

func TestPickExcluding(t *testing.T) {
	t.Parallel()
	s, _ := New([]int{50, 30, 20})
	keys := testKeys(30000, 4)
	counts := make([]int, 3)
	for _, k := range keys {
		h := Hash(k)
		i := s.PickExcluding(h, 1<<0)
		if i == 0 {
			t.Fatal("excluded target picked")
		}
		counts[i]++
		if s.PickExcluding(h, 0) != s.PickHash(h) {
			t.Fatal("PickExcluding with nothing excluded differs from PickHash")
		}
	}
	if chi := ChiSquare(counts[1:], []int{30, 20}); chi > chi2Critical001[1] {
		t.Errorf("failover counts %v: chi-square %.2f over 30/20", counts, chi)
	}
	if got := s.PickExcluding(1, 0b111); got != -1 {
		t.Errorf("all excluded: got %d, want -1", got)
	}
}

func TestPickAllocs(t *testing.T) {
	s, _ := New([]int{95, 5})
	if a := testing.AllocsPerRun(1000, func() { s.Pick("0123456789abcdef01234567") }); a != 0 {
		t.Errorf("Pick allocates %.1f times", a)
	}
	h := http.Header{"Cookie": {"a=b; dwara_affinity=0123456789abcdef01234567"}}
	if a := testing.AllocsPerRun(1000, func() { ReadCookie(h, "dwara_affinity") }); a != 0 {
		t.Errorf("ReadCookie allocates %.1f times", a)
	}
}

var affinityRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func TestMintAffinityID(t *testing.T) {
	t.Parallel()
	const per, workers = 2000, 4
	var mu sync.Mutex
	seen := make(map[string]bool, per*workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]string, per)
			for i := range local {
				local[i] = MintAffinityID()
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if !affinityRE.MatchString(id) || !ValidAffinityID(id) {
					t.Errorf("bad handle %q", id)
				}
				if seen[id] {
					t.Errorf("duplicate handle %q", id)
				}
				seen[id] = true
			}
		}()
	}
	wg.Wait()
	for _, bad := range []string{"", "0123456789abcdef0123456", "0123456789ABCDEF01234567", "0123456789abcdef0123456g", "0123456789abcdef012345678"} {
		if ValidAffinityID(bad) {
			t.Errorf("ValidAffinityID(%q) = true", bad)
		}
	}
}

func TestReadCookie(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		lines  []string
		want   string
		wantOK bool
	}{
		{"absent header", nil, "", false},
		{"single", []string{"sid=abc"}, "abc", true},
		{"among others", []string{"a=1; sid=abc; b=2"}, "abc", true},
		{"first of duplicates wins", []string{"sid=first; sid=second"}, "first", true},
		{"first across lines", []string{"a=1", "sid=one", "sid=two"}, "one", true},
		{"malformed pairs skipped", []string{"garbage; =x; ;; sid=ok"}, "ok", true},
		{"quoted value", []string{`sid="abc"`}, "abc", true},
		{"lone quote kept", []string{`sid="`}, `"`, true},
		{"empty value", []string{"sid="}, "", true},
		{"spaces trimmed", []string{"a=1;   sid =  abc  ;b=2"}, "abc", true},
		{"tabs trimmed", []string{"\tsid\t=\tabc\t"}, "abc", true},
		{"prefix name is not a match", []string{"sidx=1; xsid=2"}, "", false},
		{"case sensitive name", []string{"SID=1"}, "", false},
		{"value with equals", []string{"sid=a=b"}, "a=b", true},
		{"empty line then match", []string{"", "sid=z"}, "z", true},
		{"many lines", []string{"a=1", "b=2", "c=3", "d=4", "e=5; sid=deep"}, "deep", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			if tt.lines != nil {
				h["Cookie"] = tt.lines
			}
			got, ok := ReadCookie(h, "sid")
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ReadCookie(%q) = %q, %v; want %q, %v", tt.lines, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func FuzzReadCookie(f *testing.F) {
	for _, s := range []string{"sid=abc", "a=1; sid=\"q\"", ";;=;", "sid", "sid=; sid=x", "\x00sid=\xff"} {
		f.Add(s, "sid")
	}
	f.Fuzz(func(t *testing.T, line, name string) {
		h := http.Header{"Cookie": {line, line}}
		v, ok := ReadCookie(h, name)
		if !ok && v != "" {
			t.Fatalf("not found but value %q", v)
		}
		if ok && len(v) > len(line) {
			t.Fatalf("value %q longer than the header", v)
		}
	})
}

func BenchmarkPick(b *testing.B) {
	s, _ := New([]int{95, 5})
	key := "0123456789abcdef01234567"
	b.ReportAllocs()
	for b.Loop() {
		s.Pick(key)
	}
}

func BenchmarkReadCookie(b *testing.B) {
	h := http.Header{"Cookie": {"_ga=GA1.2.3; theme=dark; dwara_affinity=0123456789abcdef01234567"}}
	b.ReportAllocs()
	for b.Loop() {
		ReadCookie(h, "dwara_affinity")
	}
}
