package node

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
)

// TestREADMECanaryExample publishes the whole spec of README's
// "Auto-canary analysis" ("All of it together") through serve's API and
// checks what GET /api/v1/canary makes of it: shop running at 99/1, the
// first of the steps 1, 5, 25, 100, a 300 s hold, the final gate, the
// step up to 5 not gated.
func TestREADMECanaryExample(t *testing.T) {
	t.Parallel()
	section := readmeSection(t, "Auto-canary analysis")
	var example string
	for _, b := range fencedBlocks(section, "yaml") {
		if strings.HasPrefix(b, "upstreams:") && strings.Contains(b, "steps: [1, 5, 25, 100]") {
			example = b
		}
	}
	if example == "" {
		t.Fatal("no whole spec with steps [1, 5, 25, 100] in the Auto-canary section (docs/canary.md)")
	}
	spec, err := config.Parse([]byte(example))
	if err != nil {
		t.Fatalf("the README's canary example: %v", err)
	}
	js, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	srv := startServe(t, ServeConfig{DatabaseURL: dbtest.New(t)})
	publish(t, srv.Admin, js)
	var list apiv1.CanaryList
	call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/canary", nil, &list)
	if len(list.Items) != 1 {
		t.Fatalf("canary groups %+v, want shop alone", list.Items)
	}
	g := list.Items[0]
	if g.Service != "shop" || g.State != apiv1.CanaryRunning || g.Weights != [2]int{99, 1} || g.Gate != config.GateFinal ||
		g.HoldSeconds != 300 || g.NextWeight != 5 || g.NextGated || g.Schedule == nil ||
		!slices.Equal(g.Schedule.Steps, []int{1, 5, 25, 100}) || g.Schedule.Step != 0 {
		t.Errorf("the example's group: %+v (schedule %+v); want shop running at 99/1, step 0 of [1 5 25 100], hold 300 s, gate final, next 5 not gated", g, g.Schedule)
	}
}
