package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/canary"
)

// gatewayReport is a replica's report of itself, as the data plane sends it.
func gatewayReport(id string, generation int64) apiv1.GatewayInstance {
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	return apiv1.GatewayInstance{
		ID: id, Hostname: "edge-1", Listen: "127.0.0.1:8080",
		AppliedGeneration: generation, AppliedAt: started.Add(time.Minute), StartedAt: started,
		// The client's heartbeat is ignored: the server's time is recorded.
		LastHeartbeat: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC),
		Endpoints: []apiv1.EndpointState{
			{Upstream: "api-canary", Endpoint: "127.0.0.1:9101", Up: false},
			{Upstream: "api-stable", Endpoint: "127.0.0.1:9001", Up: true, InFlight: 3},
		},
	}
}

// gateways reads GET /api/v1/gateways with header.
func (e *env) gateways(header map[string]string) []apiv1.GatewayInstance {
	e.t.Helper()
	var list apiv1.GatewayList
	e.do(call{method: "GET", path: "/api/v1/gateways", header: header}).want(e.t, http.StatusOK).decode(e.t, &list)
	return list.Items
}

// auditActions lists the actions of the audit log, newest first.
func (e *env) auditActions(header map[string]string) []string {
	e.t.Helper()
	var page apiv1.AuditList
	e.do(call{method: "GET", path: "/api/v1/audit?limit=500", header: header}).want(e.t, http.StatusOK).decode(e.t, &page)
	var out []string
	for _, a := range page.Items {
		out = append(out, a.Action+" "+a.Outcome)
	}
	return out
}

func TestReportGateway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := e.publish(specWith(95, 5), "first")

	before := time.Now().Add(-time.Second)
	rep := gatewayReport("gw-1.edge:a_b", g.ID)
	r := e.do(call{method: "PUT", path: "/api/v1/gateways/gw-1.edge:a_b", body: rep}).want(t, http.StatusNoContent)
	if len(r.body) != 0 {
		t.Errorf("204 with a body: %s", r.body)
	}
	gws := e.gateways(nil)
	if len(gws) != 1 {
		t.Fatalf("gateways = %+v, want gw-1.edge:a_b", gws)
	}
	got := gws[0]
	if got.ID != rep.ID || got.Hostname != rep.Hostname || got.Listen != rep.Listen || got.AppliedGeneration != g.ID ||
		!got.AppliedAt.Equal(rep.AppliedAt) || !got.StartedAt.Equal(rep.StartedAt) || !slices.Equal(got.Endpoints, rep.Endpoints) {
		t.Errorf("gateway = %+v, want %+v", got, rep)
	}
	if got.LastHeartbeat.Before(before) || got.LastHeartbeat.After(time.Now().Add(time.Second)) {
		t.Errorf("last_heartbeat %v, want the server's now (the client said %v)", got.LastHeartbeat, rep.LastHeartbeat)
	}

	// A heartbeat replaces the report: no endpoints now, a fresher beat.
	first := got.LastHeartbeat
	time.Sleep(5 * time.Millisecond)
	rep.Endpoints = nil
	e.do(call{method: "PUT", path: "/api/v1/gateways/gw-1.edge:a_b", body: rep}).want(t, http.StatusNoContent)
	got = e.gateways(nil)[0]
	if len(got.Endpoints) != 0 || !got.LastHeartbeat.After(first) || got.AppliedGeneration != g.ID {
		t.Errorf("after a heartbeat: %+v (previous beat %v)", got, first)
	}

	// Nothing of it is audited: the publish alone is.
	if got := e.auditActions(nil); !slices.Equal(got, []string{"create accepted"}) {
		t.Errorf("audit %v, want the publish alone", got)
	}
}

func TestReportGatewayRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	good := gatewayReport("gw-1", 0)
	tests := []struct {
		name     string
		c        call
		status   int
		wantPath []string
	}{
		{"other id", call{path: "/api/v1/gateways/gw-2", body: good}, http.StatusUnprocessableEntity, []string{"id"}},
		{"bad body id", call{path: "/api/v1/gateways/gw-1", body: func() apiv1.GatewayInstance {
			g := good
			g.ID = "gw 1"
			return g
		}(), violates: true}, http.StatusUnprocessableEntity, []string{"id"}},
		{"long id", call{path: "/api/v1/gateways/" + strings.Repeat("g", 201), body: func() apiv1.GatewayInstance {
			g := good
			g.ID = strings.Repeat("g", 201)
			return g
		}(), violates: true}, http.StatusUnprocessableEntity, []string{"id"}},
		{"negative figures", call{path: "/api/v1/gateways/gw-1", body: func() apiv1.GatewayInstance {
			g := good
			g.AppliedGeneration = -1
			g.Endpoints = []apiv1.EndpointState{{Upstream: "u", Endpoint: "e", InFlight: 0}, {Upstream: "u", Endpoint: "f", InFlight: -2}}
			return g
		}(), violates: true}, http.StatusUnprocessableEntity, []string{"applied_generation", "endpoints[1].in_flight"}},
		{"unknown field", call{path: "/api/v1/gateways/gw-1", body: map[string]any{"id": "gw-1", "colour": "red"}, violates: true},
			http.StatusUnprocessableEntity, []string{"colour"}},
		{"no body", call{path: "/api/v1/gateways/gw-1", violates: true}, http.StatusUnprocessableEntity, []string{"body"}},
		{"malformed", call{path: "/api/v1/gateways/gw-1", body: `{"id":`, violates: true}, http.StatusBadRequest, nil},
		{"form", call{path: "/api/v1/gateways/gw-1", body: "id=gw-1", contentType: "application/x-www-form-urlencoded", violates: true},
			http.StatusUnsupportedMediaType, nil},
		{"cross-site", call{path: "/api/v1/gateways/gw-1", body: good, header: map[string]string{"Sec-Fetch-Site": "cross-site"}},
			http.StatusForbidden, nil},
		{"other host", call{path: "/api/v1/gateways/gw-1", body: good, header: map[string]string{"Host": "evil.example"}},
			http.StatusMisdirectedRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.c.method = "PUT"
			p := e.in(t).do(tt.c).want(t, tt.status).problem(t)
			if tt.wantPath != nil && !slices.Equal(paths(p), tt.wantPath) {
				t.Errorf("paths %v, want %v (%+v)", paths(p), tt.wantPath, p)
			}
		})
	}
	t.Run("nothing stored or audited", func(t *testing.T) {
		ee := e.in(t)
		if gws := ee.gateways(nil); len(gws) != 0 {
			t.Errorf("gateways %+v", gws)
		}
		if got := ee.auditActions(nil); len(got) != 0 {
			t.Errorf("audit %v, want none", got)
		}
	})
}

func TestReportAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{Token: "admin-secret", ReadToken: "read-secret"})
	admin := map[string]string{"Authorization": "Bearer admin-secret"}
	reader := map[string]string{"Authorization": "Bearer read-secret"}
	e.do(call{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": canarySpec(95, 5)}, header: admin}).
		want(t, http.StatusCreated)
	windows := apiv1.CanaryWindowReport{Instance: "gw-1", Rows: []apiv1.CanaryWindowRow{
		{GenerationID: 1, Service: "api", Version: "canary", Requests: 3, Errors: 1, Latency: [][2]uint64{{10, 3}}},
	}}
	calls := []call{
		{method: "PUT", path: "/api/v1/gateways/gw-1", body: gatewayReport("gw-1", 1)},
		{method: "POST", path: "/api/v1/canary/windows", body: windows},
	}
	for _, c := range calls {
		r := e.do(c).want(t, http.StatusUnauthorized)
		if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: WWW-Authenticate %q", c.method, c.path, r.header.Get("WWW-Authenticate"))
		}
		c.header = map[string]string{"Authorization": "Bearer wrong"}
		e.do(c).want(t, http.StatusUnauthorized)
		c.header = reader
		if p := e.do(c).want(t, http.StatusForbidden).problem(t); !strings.Contains(p.Detail, "read token") {
			t.Errorf("%s %s: problem %q", c.method, c.path, p.Detail)
		}
	}
	if gws := e.gateways(reader); len(gws) != 0 {
		t.Fatalf("a refused report was stored: %+v", gws)
	}
	for _, c := range calls {
		c.header = admin
		e.do(c).want(t, http.StatusNoContent)
	}
	if gws := e.gateways(reader); len(gws) != 1 || gws[0].AppliedGeneration != 1 {
		t.Errorf("gateways %+v", gws)
	}
	if _, can, _, err := e.store.CanaryWindow(context.Background(), 1, "api", time.Minute); err != nil || can.Requests != 3 {
		t.Errorf("canary window %+v, %v; want the admin's 3 requests", can, err)
	}
	// Neither the refusals nor the reports are audited.
	if got := e.auditActions(admin); !slices.Equal(got, []string{"create accepted"}) {
		t.Errorf("audit %v, want the publish alone", got)
	}
}

func TestFlushCanaryWindows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	g := e.publish(canarySpec(95, 5), "")
	fast, slow := uint64(canary.BucketOf(10*time.Millisecond)), uint64(canary.BucketOf(200*time.Millisecond))
	flush := func(rep apiv1.CanaryWindowReport) {
		t.Helper()
		e.do(call{method: "POST", path: "/api/v1/canary/windows", body: rep}).want(t, http.StatusNoContent)
	}
	flush(apiv1.CanaryWindowReport{Instance: "gw-1", Rows: []apiv1.CanaryWindowRow{
		{GenerationID: g.ID, Service: "api", Version: "baseline", Requests: 150, Errors: 1, Latency: [][2]uint64{{fast, 150}}},
		{GenerationID: g.ID, Service: "api", Version: "canary", Requests: 10, Errors: 1, Latency: [][2]uint64{{fast, 9}, {slow, 1}}},
		// Another generation's rows do not count; empty rows store nothing.
		{GenerationID: g.ID + 1, Service: "api", Version: "canary", Requests: 1000, Errors: 1000},
		{GenerationID: g.ID, Service: "web", Version: "canary"},
	}})
	flush(apiv1.CanaryWindowReport{Instance: "gw-2", Rows: []apiv1.CanaryWindowRow{
		{GenerationID: g.ID, Service: "api", Version: "baseline", Requests: 50, Errors: 1, Latency: [][2]uint64{{fast, 50}}},
		{GenerationID: g.ID, Service: "api", Version: "canary", Requests: 10, Latency: [][2]uint64{{fast, 10}}},
	}})
	// No rows at all is a flush too (latency null, rows empty).
	e.do(call{method: "POST", path: "/api/v1/canary/windows", body: `{"instance":"gw-3","rows":[]}`}).want(t, http.StatusNoContent)

	base, can, _, err := e.store.CanaryWindow(context.Background(), g.ID, "api", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if base.Requests != 200 || base.Errors != 2 || !slices.Equal(base.Latency, [][2]uint64{{fast, 200}}) {
		t.Errorf("baseline totals %+v", base)
	}
	if can.Requests != 20 || can.Errors != 1 || !slices.Equal(can.Latency, [][2]uint64{{fast, 19}, {slow, 1}}) {
		t.Errorf("canary totals %+v", can)
	}
	got := group(t, e.canaryList(), "api")
	wantB := apiv1.CanaryFigures{Requests: 200, Errors: 2, ErrorRate: 0.01, LatencyP99: canary.BucketValue(int(fast)).Seconds()}
	wantC := apiv1.CanaryFigures{Requests: 20, Errors: 1, ErrorRate: 0.05, LatencyP99: canary.BucketValue(int(slow)).Seconds()}
	if got.BaselineWindow != wantB || got.CanaryWindow != wantC {
		t.Errorf("windows: baseline %+v, canary %+v; want %+v, %+v", got.BaselineWindow, got.CanaryWindow, wantB, wantC)
	}
	if got := e.auditActions(nil); !slices.Equal(got, []string{"create accepted"}) {
		t.Errorf("audit %v, want the publish alone", got)
	}
}

func TestFlushCanaryWindowsRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	row := func(version string) map[string]any {
		return map[string]any{"generation_id": 1, "service": "api", "version": version, "requests": 2, "errors": 0, "latency": [][]uint64{{3, 2}}}
	}
	edit := func(version string, kv ...any) map[string]any {
		r := row(version)
		for i := 0; i < len(kv); i += 2 {
			r[kv[i].(string)] = kv[i+1]
		}
		return r
	}
	tooMany := make([]map[string]any, apiv1.MaxCanaryWindowRows+1)
	for i := range tooMany {
		tooMany[i] = edit("canary", "generation_id", i+1)
	}
	tests := []struct {
		name     string
		body     any
		status   int
		wantPath []string
	}{
		{"every row problem", map[string]any{"instance": "gw-1", "rows": []any{
			row("baseline"),
			edit("stable", "generation_id", 0),
			edit("canary", "service", "Api"),
			edit("canary", "errors", 3),
			edit("canary", "generation_id", 4, "latency", [][]uint64{{5, 1}, {5, 1}, {2816, 1}}), // 1408..2815 are TTFT buckets
			edit("canary", "generation_id", 5, "latency", [][]uint64{{5, 1, 7}, {6}}),
			row("baseline"),
		}}, http.StatusUnprocessableEntity, []string{
			"rows[1].generation_id", "rows[1].version", "rows[2].service", "rows[3].errors",
			"rows[4].latency[1]", "rows[4].latency[2]", "rows[5].latency[0]", "rows[5].latency[1]", "rows[6]"}},
		{"bad instance", map[string]any{"instance": "", "rows": []any{}}, http.StatusUnprocessableEntity, []string{"instance"}},
		{"too many rows", map[string]any{"instance": "gw-1", "rows": tooMany}, http.StatusUnprocessableEntity, []string{"rows"}},
		{"negative count", map[string]any{"instance": "gw-1", "rows": []any{edit("canary", "requests", -1)}},
			http.StatusUnprocessableEntity, nil},
		{"huge count", `{"instance":"gw-1","rows":[{"generation_id":1,"service":"api","version":"canary","requests":9223372036854775808,"errors":0,"latency":[[1,9223372036854775808]]}]}`,
			http.StatusUnprocessableEntity, []string{"rows[0].requests", "rows[0].latency[0]"}},
		{"unknown field", map[string]any{"instance": "gw-1", "rows": []any{edit("canary", "p99", 1)}}, http.StatusUnprocessableEntity, nil},
		{"malformed", `{"instance":"gw-1","rows":[`, http.StatusBadRequest, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.in(t).do(call{method: "POST", path: "/api/v1/canary/windows", body: tt.body, violates: true}).want(t, tt.status).problem(t)
			if tt.wantPath != nil && !slices.Equal(paths(p), tt.wantPath) {
				js, _ := json.MarshalIndent(p.Errors, "", "  ")
				t.Errorf("paths %v, want %v\n%s", paths(p), tt.wantPath, js)
			}
		})
	}
	t.Run("nothing stored or audited", func(t *testing.T) {
		ee := e.in(t)
		for _, gen := range []int64{1, 2} {
			if base, can, _, err := ee.store.CanaryWindow(context.Background(), gen, "api", time.Minute); err != nil || base.Requests != 0 || can.Requests != 0 {
				t.Errorf("generation %d: %+v, %+v, %v; want nothing stored", gen, base, can, err)
			}
		}
		if got := ee.auditActions(nil); len(got) != 0 {
			t.Errorf("audit %v, want none", got)
		}
	})
}

// GET /api/v1/gateways lists the live instances; ?all=true the stale ones
// too, marked so; any other value of all is a 400 naming it.
func TestGatewaysStale(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	e.do(call{method: "PUT", path: "/api/v1/gateways/gw-live", body: gatewayReport("gw-live", 0)}).want(t, http.StatusNoContent)
	old := gatewayReport("gw-old", 0)
	old.LastHeartbeat = time.Now().Add(-time.Minute)
	if err := e.store.UpsertGateway(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	var live, all apiv1.GatewayList
	e.do(call{method: "GET", path: "/api/v1/gateways"}).want(t, http.StatusOK).decode(t, &live)
	if len(live.Items) != 1 || live.Items[0].ID != "gw-live" || live.Items[0].Stale {
		t.Errorf("GET /api/v1/gateways = %+v, want gw-live only, not stale", live.Items)
	}
	e.do(call{method: "GET", path: "/api/v1/gateways?all=true"}).want(t, http.StatusOK).decode(t, &all)
	if len(all.Items) != 2 || all.Items[0].ID != "gw-live" || all.Items[0].Stale || all.Items[1].ID != "gw-old" || !all.Items[1].Stale {
		t.Errorf("GET /api/v1/gateways?all=true = %+v, want gw-live live and gw-old stale", all.Items)
	}
	p := e.do(call{method: "GET", path: "/api/v1/gateways?all=yes", violates: true}).want(t, http.StatusBadRequest).problem(t)
	if got := paths(p); len(got) != 1 || got[0] != "all" {
		t.Errorf("?all=yes: problem %+v, want one error at all", p)
	}
}
