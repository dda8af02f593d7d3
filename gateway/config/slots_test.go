package config

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/dwara/dwara/gateway/split"
)

// stableSpec is validSpec with the api service's split stable at w (no
// canary analysis, which stable allocation refuses), its table computed
// fresh.
func stableSpec(w ...int) *Spec {
	s := validSpec()
	sp := s.Services[0].Split
	sp.CanaryAnalysis = nil
	sp.Allocation = AllocationStable
	for i := range w {
		sp.Targets[i].Weight = w[i]
	}
	Allocate(nil, s)
	return s
}

func TestEncodeSlots(t *testing.T) {
	t.Parallel()
	s := stableSpec(95, 5)
	if got, want := s.Services[0].Split.Slots, [][]int{{0, 9500}, {1, 500}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("fresh 95/5 slots = %v, want %v", got, want)
	}
	table := split.Rebalance(split.Fresh([]int{50, 50}), []int{0, 1}, []int{75, 25})
	back, err := DecodeSlots(EncodeSlots(table), 2)
	if err != nil || !reflect.DeepEqual(back, table) {
		t.Fatalf("round trip: %v", err)
	}
}

func TestValidateSlots(t *testing.T) {
	t.Parallel()
	const sl = "services[0].split.slots"
	tests := []struct {
		name string
		edit func(*Split)
		want []problem
	}{
		{"valid", func(*Split) {}, nil},
		{"no table (computed later)", func(sp *Split) { sp.Slots = nil }, nil},
		{"unknown allocation", func(sp *Split) { sp.Allocation = "sticky" }, []problem{{"services[0].split.allocation", `unknown allocation "sticky"; allowed: hash, stable`, ""}}},
		{"slots on a hash split", func(sp *Split) { sp.Allocation = "" }, []problem{{sl, "only a split with allocation stable", ""}}},
		{"too few slots", func(sp *Split) { sp.Slots = [][]int{{0, 9500}, {1, 499}} }, []problem{{sl, "the runs cover 9999 slots, want 10000", ""}}},
		{"too many slots", func(sp *Split) { sp.Slots = [][]int{{0, 9500}, {1, 501}} }, []problem{{sl, "run 1: the runs cover more than 10000 slots", ""}}},
		{"index out of range", func(sp *Split) { sp.Slots = [][]int{{0, 9500}, {2, 500}} }, []problem{{sl, "run 1: target index must be 0..1", ""}}},
		{"negative index", func(sp *Split) { sp.Slots = [][]int{{-1, 9500}, {1, 500}} }, []problem{{sl, "run 0: target index must be 0..1", ""}}},
		{"not a pair", func(sp *Split) { sp.Slots = [][]int{{0, 9500, 1}, {1, 500}} }, []problem{{sl, "run 0: must be a [target index, run length] pair", ""}}},
		{"empty run", func(sp *Split) { sp.Slots = [][]int{{0, 9500}, {1, 0}, {1, 500}} }, []problem{{sl, "run 1: run length must be at least 1", ""}}},
		{"not canonical", func(sp *Split) { sp.Slots = [][]int{{0, 9000}, {0, 500}, {1, 500}} }, []problem{{sl, "run 1: same target 0 as the run before", ""}}},
		{"empty list", func(sp *Split) { sp.Slots = [][]int{} }, []problem{{sl, "the runs cover 0 slots", ""}}},
		{"wrong counts", func(sp *Split) { sp.Slots = [][]int{{0, 9000}, {1, 1000}} }, []problem{{sl, "target 0 (api-stable) owns 9000 slots, want 9500", ""}}},
		{"counts of other weights", func(sp *Split) { sp.Targets[0].Weight, sp.Targets[1].Weight = 90, 10 }, []problem{{sl, "owns 9500 slots, want 9000", ""}}},
		{"canary analysis", func(sp *Split) {
			sp.CanaryAnalysis = validSpec().Services[0].Split.CanaryAnalysis
		}, []problem{{"services[0].split.allocation", "stable allocation cannot be combined with canary_analysis", ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := stableSpec(95, 5)
			tt.edit(s.Services[0].Split)
			checkProblems(t, s.Validate(), tt.want...)
		})
	}
}

func TestParseSlots(t *testing.T) {
	t.Parallel()
	s := stableSpec(95, 5)
	s.Services[0].Split.Slots = [][]int{{0, 9000}, {1, 1000}} // stale: 90/10's table
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	// A spec (a stored generation, a spec file) is validated strictly.
	_, err = ParseAs(js, FormatJSON)
	checkProblems(t, err, problem{"services[0].split.slots", "owns 9000 slots, want 9500", ""})
	// A publish body's slots are dropped: the API computes them.
	env, err := ParseEnvelope([]byte(`{"message":"m","spec":`+string(js)+`}`), FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if env.Spec.Services[0].Split.Slots != nil {
		t.Errorf("ParseEnvelope kept slots %v", env.Spec.Services[0].Split.Slots)
	}
	if doc, err := ParseDocument(js); err != nil || doc.Spec.Services[0].Split.Slots != nil {
		t.Errorf("ParseDocument: %v, slots %v", err, doc.Spec)
	}
	// Wrong JSON types are structural problems.
	bad := strings.Replace(string(js), `"slots":[[0,9000],[1,1000]]`, `"slots":"abc"`, 1)
	_, err = ParseAs([]byte(bad), FormatJSON)
	checkProblems(t, err, problem{"services[0].split.slots", "must be an array, got a string", ""})
}

func TestAllocateFromParent(t *testing.T) {
	t.Parallel()
	parent := stableSpec(50, 50)
	next := parent.Clone()
	next.Services[0].Split.Targets[0].Weight = 75
	next.Services[0].Split.Targets[1].Weight = 25
	next.Services[0].Split.Slots = [][]int{{1, 10000}} // whatever the client sent is replaced
	Allocate(parent, next)
	if err := next.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := ServiceDisplacement(&parent.Services[0], &next.Services[0]); got != 0.25 {
		t.Errorf("50/50 -> 75/25 moved share %v, want 0.25", got)
	}
	// Reordering the targets keeps every slot's upstream.
	re := next.Clone()
	ts := re.Services[0].Split.Targets
	ts[0], ts[1] = ts[1], ts[0]
	Allocate(next, re)
	if got := ServiceDisplacement(&next.Services[0], &re.Services[0]); got != 0 {
		t.Errorf("reorder moved share %v, want 0", got)
	}
	// Same weights: the same table, so an unchanged spec stays unchanged.
	same := next.Clone()
	Allocate(next, same)
	if !reflect.DeepEqual(same, next) {
		t.Error("Allocate with unchanged weights changed the spec")
	}
	// A hash split loses any slots; a service new in next gets a fresh table.
	h := stableSpec(95, 5)
	h.Services[0].Split.Allocation = ""
	Allocate(nil, h)
	if h.Services[0].Split.Slots != nil {
		t.Error("a hash split kept slots")
	}
}

func TestServiceDisplacementModes(t *testing.T) {
	t.Parallel()
	hash := validSpec().Services[0]
	hash.Split.CanaryAnalysis = nil
	stable := stableSpec(95, 5).Services[0]
	// Same weights, hash -> stable: the layouts differ (h % 100 < 95 against
	// h % 10000 < 9500): 475 + 475 residues of the 10000-residue period.
	if got := ServiceDisplacement(&hash, &stable); math.Abs(got-0.095) > 1e-12 {
		t.Errorf("95/5 hash -> stable moved %v, want 0.095", got)
	}
	h2 := hash
	h2.Split = &Split{Targets: []Target{{"api-stable", 90}, {"api-canary", 10}}}
	if got := ServiceDisplacement(&hash, &h2); math.Abs(got-0.05) > 1e-12 {
		t.Errorf("hash 95/5 -> 90/10 moved %v, want 0.05", got)
	}
	// Stable: a change of the total with the same ratios moves nothing.
	parent := stableSpec(95, 5)
	next := parent.Clone()
	next.Services[0].Split.Targets[0].Weight, next.Services[0].Split.Targets[1].Weight = 190, 10
	Allocate(parent, next)
	if got := ServiceDisplacement(&parent.Services[0], &next.Services[0]); got != 0 {
		t.Errorf("stable 95/5 -> 190/10 moved %v, want 0", got)
	}
	d := Diff(parent, next)
	if got := strings.Join(d.Services[0].Details, "; "); strings.Contains(got, "reshuffled") || !strings.Contains(got, "total weight 100->200") {
		t.Errorf("stable diff details %q", got)
	}
	d = Diff(validSpec(), parent)
	if got := strings.Join(d.Services[0].Details, "; "); !strings.Contains(got, "allocation hash->stable") {
		t.Errorf("hash -> stable diff details %q", got)
	}
}

func TestEditsStable(t *testing.T) {
	t.Parallel()
	s := stableSpec(50, 50)
	// A change of the total needs no allow_reshuffle in stable mode.
	w, err := SetWeights(s, "api", map[string]int{"api-stable": 60, "api-canary": 20}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := ServiceDisplacement(&s.Services[0], &w.Services[0]); got != 0.25 {
		t.Errorf("50/50 -> 60/20 moved %v, want 0.25", got)
	}
	f, err := Flip(w, "api")
	if err != nil {
		t.Fatal(err)
	}
	if got := ServiceDisplacement(&w.Services[0], &f.Services[0]); got != 0.5 {
		t.Errorf("flip 75/25 -> 25/75 moved %v, want 0.5", got)
	}
	k, err := Kill(f, "api")
	if err != nil {
		t.Fatal(err)
	}
	if got := ServiceDisplacement(&f.Services[0], &k.Services[0]); got != 0.75 {
		t.Errorf("kill 25/75 moved %v, want 0.75", got)
	}
	if s.Services[0].Split.Targets[0].Weight != 50 || !reflect.DeepEqual(s.Services[0].Split.Slots, [][]int{{0, 5000}, {1, 5000}}) {
		t.Error("an edit modified its input")
	}
}
