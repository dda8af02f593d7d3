package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
)

func TestGatewaysShowEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := e.publish(specWith(95, 5), "first")
	now := time.Now().UTC().Truncate(time.Millisecond)
	states := []apiv1.EndpointState{
		{Upstream: "api-canary", Endpoint: "127.0.0.1:9101", Up: false},
		{Upstream: "api-stable", Endpoint: "127.0.0.1:9001", Up: true, InFlight: 4},
		{Upstream: "api-stable", Endpoint: "127.0.0.1:9002", Up: true},
	}
	for _, gi := range []apiv1.GatewayInstance{
		{ID: "gw-1", Hostname: "edge-1", Listen: "127.0.0.1:8080", AppliedGeneration: g.ID, AppliedAt: now, StartedAt: now, Endpoints: states},
		// An instance that reported no endpoint states.
		{ID: "gw-2", Hostname: "edge-2", Listen: "127.0.0.1:8081", StartedAt: now},
	} {
		if err := e.store.UpsertGateway(t.Context(), gi); err != nil {
			t.Fatal(err)
		}
	}

	// The response is checked against openapi.yaml by the env's client.
	r := e.do(call{method: "GET", path: "/api/v1/gateways"}).want(t, http.StatusOK)
	var gws apiv1.GatewayList
	r.decode(t, &gws)
	if len(gws.Items) != 2 || gws.Items[0].ID != "gw-1" || gws.Items[1].ID != "gw-2" {
		t.Fatalf("gateways = %+v, want gw-1 and gw-2", gws.Items)
	}
	if got := gws.Items[0].Endpoints; !slices.Equal(got, states) {
		t.Errorf("gw-1 endpoints = %+v, want %+v", got, states)
	}

	// The wire shape: every instance has an endpoints array, never null,
	// of {upstream, endpoint, up, in_flight}.
	var raw struct {
		Items []map[string]json.RawMessage `json:"items"`
	}
	r.decode(t, &raw)
	if got := string(raw.Items[1]["endpoints"]); got != "[]" {
		t.Errorf("gw-2 endpoints = %s, want []", got)
	}
	var first []map[string]any
	if err := json.Unmarshal(raw.Items[0]["endpoints"], &first); err != nil || len(first) != 3 {
		t.Fatalf("gw-1 endpoints %s: %v", raw.Items[0]["endpoints"], err)
	}
	want := map[string]any{"upstream": "api-stable", "endpoint": "127.0.0.1:9001", "up": true, "in_flight": float64(4)}
	if got := first[1]; len(got) != len(want) || got["upstream"] != want["upstream"] || got["endpoint"] != want["endpoint"] ||
		got["up"] != want["up"] || got["in_flight"] != want["in_flight"] {
		t.Errorf("gw-1 endpoint 1 = %v, want %v", got, want)
	}
}
