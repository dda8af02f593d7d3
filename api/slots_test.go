package api

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/split"
)

// stableBody is a publish body whose service "api" is a stable split over
// the given targets (upstream name -> weight, in order).
func stableBody(msg string, targets ...any) map[string]any {
	ts := []map[string]any{}
	for i := 0; i < len(targets); i += 2 {
		ts = append(ts, map[string]any{"upstream": targets[i], "weight": targets[i+1]})
	}
	return map[string]any{"message": msg, "spec": map[string]any{
		"upstreams": []map[string]any{
			{"name": "blue", "endpoints": []string{"127.0.0.1:9001"}},
			{"name": "green", "endpoints": []string{"127.0.0.1:9002"}},
			{"name": "gray", "endpoints": []string{"127.0.0.1:9003"}},
		},
		"services": []map[string]any{
			{"name": "api", "base_path": "/", "split": map[string]any{"allocation": "stable", "targets": ts}},
		},
	}}
}

// branches returns the upstream each key goes to under g's service "api",
// compiled as the proxy compiles it.
func branches(t *testing.T, g apiv1.Generation, keys []string) []string {
	t.Helper()
	spec, err := config.ParseAs(g.Spec, config.FormatJSON) // strict: the stored table validates
	if err != nil {
		t.Fatalf("generation %d: %v", g.ID, err)
	}
	svc, _ := spec.Service("api")
	ws := make([]int, len(svc.Split.Targets))
	for i, tg := range svc.Split.Targets {
		ws[i] = tg.Weight
	}
	if svc.Split.Slots == nil {
		t.Fatalf("generation %d: stable split stored without slots", g.ID)
	}
	sp, err := split.NewStable(ws, svc.Split.Table())
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = svc.Split.Targets[sp.Pick(k)].Upstream
	}
	return out
}

func fixedKeys(n int) []string {
	r := rand.New(rand.NewPCG(42, 42))
	keys := make([]string, n)
	var b [12]byte
	for i := range keys {
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		keys[i] = hex.EncodeToString(b[:])
	}
	return keys
}

func changed(a, b []string) (n int, moves map[string]int) {
	moves = map[string]int{}
	for i := range a {
		if a[i] != b[i] {
			n++
			moves[a[i]+"->"+b[i]]++
		}
	}
	return n, moves
}

func TestStableAllocationThroughAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	keys := fixedKeys(10000)

	g1 := e.do(call{method: "POST", path: "/api/v1/generations", body: stableBody("50/50", "blue", 50, "green", 50)}).
		want(t, http.StatusCreated).generation(t)
	b1 := branches(t, g1, keys)

	// Same ratios at another total: dry run says 0, the publish moves none,
	// and no allow_reshuffle is needed.
	same := e.do(call{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"blue": 30, "green": 30}}}).
		want(t, http.StatusCreated).generation(t)
	if n, _ := changed(b1, branches(t, same, keys)); n != 0 {
		t.Errorf("50/50 -> 30/30 moved %d of %d keys, want 0", n, len(keys))
	}
	d := e.do(call{method: "GET", path: fmt.Sprintf("/api/v1/generations/%d/diff", same.ID)}).want(t, http.StatusOK)
	var diff apiv1.Diff
	d.decode(t, &diff)
	if diff.Services[0].MovedShare != 0 {
		t.Errorf("diff moved_share %v, want 0", diff.Services[0].MovedShare)
	}

	// 30/30 -> 75/25 (as a whole-spec publish): dry run 0.25, then exactly
	// 25% of the table, all green -> blue.
	var dr apiv1.DryRunResult
	e.do(call{method: "POST", path: "/api/v1/generations?dry_run=true", body: stableBody("", "blue", 75, "green", 25)}).
		want(t, http.StatusOK).decode(t, &dr)
	if got := dr.Impact.Services[0].MovedShare; got != 0.25 {
		t.Errorf("dry run moved_share %v, want 0.25", got)
	}
	g2 := e.do(call{method: "POST", path: "/api/v1/generations", body: stableBody("75/25", "blue", 75, "green", 25)}).
		want(t, http.StatusCreated).generation(t)
	b2 := branches(t, g2, keys)
	n, moves := changed(b1, b2)
	t.Logf("50/50 -> 75/25 on %d keys: %d moved %v", len(keys), n, moves)
	if moves["green->blue"] != n || n < 2300 || n > 2700 {
		t.Errorf("moved %d keys %v, want about 2500, all green->blue", n, moves)
	}

	// A third target at 10%: the diff says exactly 0.1, every moved key
	// goes to gray.
	gen3 := e.do(call{method: "POST", path: "/api/v1/generations", body: stableBody("gray 10%", "gray", 20, "blue", 135, "green", 45)}).
		want(t, http.StatusCreated).generation(t)
	e.do(call{method: "GET", path: fmt.Sprintf("/api/v1/generations/%d/diff", gen3.ID)}).want(t, http.StatusOK).decode(t, &diff)
	if got := diff.Services[0].MovedShare; got != 0.1 {
		t.Errorf("adding gray at 10%%: moved_share %v, want 0.1", got)
	}
	b3 := branches(t, gen3, keys)
	n, moves = changed(b2, b3)
	t.Logf("+ gray at 10%% on %d keys: %d moved %v", len(keys), n, moves)
	if moves["blue->gray"]+moves["green->gray"] != n {
		t.Errorf("moves %v, want all to gray", moves)
	}

	// Publishing the active spec again (as read, slots and all) is unchanged.
	cur := e.do(call{method: "GET", path: "/api/v1/generations/current"}).want(t, http.StatusOK).generation(t)
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": cur.Spec}}).want(t, http.StatusOK)

	// Roll back to generation 1: its spec, table included, so every key
	// returns to its first branch.
	rb := e.do(call{method: "POST", path: fmt.Sprintf("/api/v1/generations/%d/rollback", g1.ID)}).
		want(t, http.StatusCreated).generation(t)
	if rb.Action != apiv1.ActionRollback {
		t.Errorf("action %q", rb.Action)
	}
	s1, _ := decodeSpec(g1)
	sr, _ := decodeSpec(rb)
	if !reflect.DeepEqual(s1, sr) {
		t.Errorf("rollback spec differs from generation 1's")
	}
	if n, _ := changed(b1, branches(t, rb, keys)); n != 0 {
		t.Errorf("after rollback %d of %d keys are not on their generation-1 branch", n, len(keys))
	}

	// A client's table in a publish body is ignored and recomputed.
	body := stableBody("x", "blue", 50, "green", 50)
	body["spec"].(map[string]any)["services"].([]map[string]any)[0]["split"].(map[string]any)["slots"] = [][]int{{1, 10000}}
	g := e.do(call{method: "POST", path: "/api/v1/generations", body: body}).want(t, http.StatusOK).generation(t)
	if !g.Unchanged {
		t.Error("a publish of the active spec with a made-up table was stored")
	}
}
