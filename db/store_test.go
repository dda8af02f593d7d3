package db_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testrun"
)

func TestPublishConcurrentIDsAreGapFree(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()

	const n = 50
	var wg sync.WaitGroup
	ids := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			g, err := s.Publish(ctx, db.PublishParams{Spec: spec(i), Author: "test"})
			ids[i], errs[i] = g.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i+1) {
			t.Fatalf("sorted ids = %v, want 1..%d", ids, n)
		}
	}

	for id := int64(1); id <= n; id++ {
		g, err := s.Get(ctx, id)
		if err != nil {
			t.Fatalf("get %d: %v", id, err)
		}
		switch {
		case id == 1 && g.ParentID != nil:
			t.Errorf("generation 1 parent = %d, want nil", *g.ParentID)
		case id > 1 && (g.ParentID == nil || *g.ParentID != id-1):
			t.Errorf("generation %d parent = %v, want %d", id, g.ParentID, id-1)
		}
		if g.Action != apiv1.ActionCreate {
			t.Errorf("generation %d action = %q, want %q (the default)", id, g.Action, apiv1.ActionCreate)
		}
	}
	cur, err := s.Current(ctx)
	if err != nil || cur.ID != n {
		t.Fatalf("current = %d, %v; want %d", cur.ID, err, n)
	}
}

func TestPublishIfMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("zero on empty database", func(t *testing.T) {
		t.Parallel()
		s, _ := dbtest.NewStore(t)
		g, err := s.Publish(ctx, db.PublishParams{Spec: spec(1), IfMatch: ptr(int64(0))})
		if err != nil || g.ID != 1 {
			t.Fatalf("publish = %d, %v; want 1, nil", g.ID, err)
		}
	})

	t.Run("stale", func(t *testing.T) {
		t.Parallel()
		s, _ := dbtest.NewStore(t)
		publish(t, s, 1)
		publish(t, s, 2)
		for _, ifMatch := range []int64{0, 1, 3} {
			_, err := s.Publish(ctx, db.PublishParams{Spec: spec(3), IfMatch: ptr(ifMatch)})
			if !errors.Is(err, db.ErrPreconditionFailed) {
				t.Errorf("publish if-match %d = %v, want ErrPreconditionFailed", ifMatch, err)
			}
		}
		g, err := s.Publish(ctx, db.PublishParams{Spec: spec(3), IfMatch: ptr(int64(2))})
		if err != nil || g.ID != 3 {
			t.Fatalf("publish if-match 2 = %d, %v; want 3, nil", g.ID, err)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		t.Parallel()
		s, _ := dbtest.NewStore(t)
		publish(t, s, 1)

		const n = 20
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, errs[i] = s.Publish(ctx, db.PublishParams{Spec: spec(100 + i), IfMatch: ptr(int64(1))})
			})
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, db.ErrPreconditionFailed):
				t.Errorf("publish %d: %v, want nil or ErrPreconditionFailed", i, err)
			}
		}
		if won != 1 {
			t.Errorf("%d publishers won, want exactly 1", won)
		}
		list, err := s.List(ctx, 100, 0)
		if err != nil || len(list) != 2 {
			t.Fatalf("list = %d generations, %v; want 2", len(list), err)
		}
	})
}

func TestPublishUnchanged(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	first := publish(t, s, 1)
	publish(t, s, 2)
	// The active spec again, with other key order and spacing: jsonb equal.
	var v any
	if err := json.Unmarshal(spec(2), &v); err != nil {
		t.Fatal(err)
	}
	same, err := json.MarshalIndent(v, "", "    ") // map keys sorted: another order
	if err != nil || bytes.Equal(same, spec(2)) {
		t.Fatalf("re-encode the spec: %v (unchanged bytes: %t)", err, bytes.Equal(same, spec(2)))
	}
	for _, action := range []string{apiv1.ActionCreate, apiv1.ActionKill} {
		g, err := s.Publish(ctx, db.PublishParams{Spec: same, Action: action, Author: "test"})
		if err != nil {
			t.Fatalf("publish the active spec (%s): %v", action, err)
		}
		if !g.Unchanged || g.ID != 2 || g.Action != apiv1.ActionCreate || len(g.Spec) == 0 {
			t.Fatalf("publish the active spec (%s) = id %d action %s unchanged %t; want the active generation 2, unchanged", action, g.ID, g.Action, g.Unchanged)
		}
	}
	// A stale If-Match is still a precondition failure, not "unchanged".
	if _, err := s.Publish(ctx, db.PublishParams{Spec: same, IfMatch: &first.ID}); !errors.Is(err, db.ErrPreconditionFailed) {
		t.Fatalf("publish the active spec with a stale If-Match = %v, want ErrPreconditionFailed", err)
	}
	// The spec of an older generation is a change.
	g, err := s.Publish(ctx, db.PublishParams{Spec: spec(1), Action: apiv1.ActionRollback, SourceID: &first.ID})
	if err != nil || g.Unchanged || g.ID != 3 {
		t.Fatalf("roll back to generation 1 = id %d unchanged %t, %v; want generation 3", g.ID, g.Unchanged, err)
	}
	if list, err := s.List(ctx, 10, 0); err != nil || len(list) != 3 {
		t.Fatalf("list = %d generations, %v; want 3", len(list), err)
	}
}

func TestPublishValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		params  db.PublishParams
		wantErr error // nil: any error
	}{
		{name: "unknown action", params: db.PublishParams{Spec: spec(1), Action: "bump"}},
		{name: "empty spec", params: db.PublishParams{Action: apiv1.ActionCreate}},
		{name: "spec not an object", params: db.PublishParams{Spec: json.RawMessage(`[1, 2]`)}},
		{name: "spec not json", params: db.PublishParams{Spec: json.RawMessage(`{"a":`)}},
		{name: "rollback without source", params: db.PublishParams{Spec: spec(2), Action: apiv1.ActionRollback}},
		{name: "rollback to missing source", params: db.PublishParams{Spec: spec(2), Action: apiv1.ActionRollback, SourceID: ptr(int64(7))}, wantErr: db.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, _ := dbtest.NewStore(t)
			publish(t, s, 1)
			_, err := s.Publish(context.Background(), tt.params)
			if err == nil {
				t.Fatal("publish succeeded, want an error")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("publish = %v, want %v", err, tt.wantErr)
			}
			if cur, err := s.Current(context.Background()); err != nil || cur.ID != 1 {
				t.Fatalf("current after failed publish = %d, %v; want 1", cur.ID, err)
			}
		})
	}
}

func TestPublishRollbackRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	first := publish(t, s, 1)
	publish(t, s, 2)

	rb, err := s.Publish(ctx, db.PublishParams{
		Spec: first.Spec, Action: apiv1.ActionRollback, SourceID: ptr(first.ID),
		Author: "alice", Message: "back to 1",
	})
	if err != nil {
		t.Fatalf("publish rollback: %v", err)
	}
	got, err := s.Get(ctx, rb.ID)
	if err != nil {
		t.Fatalf("get %d: %v", rb.ID, err)
	}
	if got.ID != 3 || *got.ParentID != 2 || got.Action != apiv1.ActionRollback || got.SourceID == nil || *got.SourceID != 1 ||
		got.Author != "alice" || got.Message != "back to 1" || got.CreatedAt.IsZero() {
		t.Errorf("rollback generation = %+v", got)
	}
	if !spectest.JSONEqual(t, got.Spec, first.Spec) || !spectest.JSONEqual(t, got.Spec, spec(1)) {
		t.Errorf("rollback spec = %s, want %s", got.Spec, spec(1))
	}
	// Publish returns the bytes it stored, Get PostgreSQL's rendering of
	// them: the same spec.
	if !spectest.JSONEqual(t, got.Spec, rb.Spec) || !got.CreatedAt.Equal(rb.CreatedAt) {
		t.Errorf("Publish returned %s at %v, Get returns %s at %v", rb.Spec, rb.CreatedAt, got.Spec, got.CreatedAt)
	}
}

// TestPublishReturnsTheStoredBytes checks that Publish and Edit answer with
// the spec bytes they were given, new generation or unchanged, rather than
// reading the stored jsonb back (which PostgreSQL renders with its own key
// order and spacing), and that NewestID follows them.
func TestPublishReturnsTheStoredBytes(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	if id, err := s.NewestID(ctx); err != nil || id != 0 {
		t.Fatalf("NewestID on an empty database = %d, %v; want 0", id, err)
	}
	// Keys out of jsonb's order (shortest first), with spacing jsonb drops.
	sent := json.RawMessage(`{"services": [], "upstreams": [],  "z": {"bb": 1, "a": "x<y"}}`)
	check := func(what string, g apiv1.Generation, err error, id int64, unchanged bool) {
		t.Helper()
		if err != nil || g.ID != id || g.Unchanged != unchanged {
			t.Fatalf("%s = id %d unchanged %t, %v; want id %d unchanged %t", what, g.ID, g.Unchanged, err, id, unchanged)
		}
		if !bytes.Equal(g.Spec, sent) {
			t.Errorf("%s returned spec %s, want the bytes stored %s", what, g.Spec, sent)
		}
		if newest, err := s.NewestID(ctx); err != nil || newest != id {
			t.Errorf("after %s NewestID = %d, %v; want %d", what, newest, err, id)
		}
	}
	g, err := s.Publish(ctx, db.PublishParams{Spec: sent})
	check("Publish", g, err, 1, false)
	stored, err := s.Get(ctx, 1)
	if err != nil || bytes.Equal(stored.Spec, sent) || !spectest.JSONEqual(t, stored.Spec, sent) {
		t.Fatalf("Get = %s, %v; want PostgreSQL's rendering of %s", stored.Spec, err, sent)
	}
	g, err = s.Publish(ctx, db.PublishParams{Spec: sent})
	check("Publish of the active spec", g, err, 1, true)
	g, err = s.Edit(ctx, func(apiv1.Generation) (db.PublishParams, error) {
		return db.PublishParams{Spec: sent, Action: apiv1.ActionKill}, nil
	})
	check("Edit to the active spec", g, err, 1, true)
	publish(t, s, 2)
	g, err = s.Edit(ctx, func(apiv1.Generation) (db.PublishParams, error) {
		return db.PublishParams{Spec: sent, Action: apiv1.ActionFlip}, nil
	})
	check("Edit", g, err, 3, false)
}

func TestHead(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Head(ctx, 1); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("Head(1) on an empty database = %v, want ErrNotFound", err)
	}
	publish(t, s, 1)
	g := publish(t, s, 2)
	h, err := s.Head(ctx, 2)
	if err != nil || h.Spec != nil {
		t.Fatalf("Head(2) = %+v, %v; want generation 2 without its spec", h, err)
	}
	if h.ID != 2 || h.ParentID == nil || *h.ParentID != 1 || h.Action != g.Action || h.Author != g.Author ||
		h.Message != g.Message || !h.CreatedAt.Equal(g.CreatedAt) {
		t.Errorf("Head(2) = %+v, want %+v without its spec", h, g)
	}
}

func TestGetAndCurrentNotFound(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	if _, err := s.Current(ctx); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("current on empty database = %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, 1); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("get 1 on empty database = %v, want ErrNotFound", err)
	}
	publish(t, s, 1)
	if _, err := s.Get(ctx, 2); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("get 2 = %v, want ErrNotFound", err)
	}
	if g, err := s.Current(ctx); err != nil || g.ID != 1 || len(g.Spec) == 0 {
		t.Errorf("current = %+v, %v; want generation 1 with its spec", g, err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	for i := 1; i <= 7; i++ {
		publish(t, s, i)
	}

	tests := []struct {
		name     string
		limit    int
		beforeID int64
		want     []int64
	}{
		{name: "first page", limit: 3, want: []int64{7, 6, 5}},
		{name: "second page", limit: 3, beforeID: 5, want: []int64{4, 3, 2}},
		{name: "last page", limit: 3, beforeID: 2, want: []int64{1}},
		{name: "past the end", limit: 3, beforeID: 1, want: []int64{}},
		{name: "all", limit: 100, want: []int64{7, 6, 5, 4, 3, 2, 1}},
		{name: "before beyond newest", limit: 2, beforeID: 100, want: []int64{7, 6}},
		{name: "zero limit", limit: 0, want: []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			list, err := s.List(ctx, tt.limit, tt.beforeID)
			if err != nil {
				t.Fatalf("list: %v", err)
			}
			got := []int64{}
			for _, g := range list {
				got = append(got, g.ID)
				if g.Spec != nil {
					t.Errorf("generation %d has a spec in the list", g.ID)
				}
				if g.Action != apiv1.ActionCreate || g.Author != "test" || g.CreatedAt.IsZero() {
					t.Errorf("generation %d = %+v, want its metadata", g.ID, g)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("ids = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAuditRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	g := publish(t, s, 1)

	at := time.Date(2024, 5, 6, 7, 8, 9, 123456000, time.UTC)
	in := []apiv1.AuditEntry{
		{Actor: "alice", Action: "publish", Outcome: "accepted", Status: 201, GenerationID: &g.ID,
			RequestID: "req-1", RemoteAddr: "127.0.0.1:5000", Detail: json.RawMessage(`{"message": "first"}`)},
		{Actor: "bob", Action: "rollback", Outcome: "refused", Status: 404, GenerationID: ptr(int64(99)),
			RequestID: "req-2", RemoteAddr: "[::1]:5001"},
		{Actor: "carol", Action: "flip", Outcome: "refused", Status: 409, At: at},
	}
	var recorded []apiv1.AuditEntry
	before := time.Now().Add(-time.Minute)
	for _, e := range in {
		got, err := s.RecordAudit(ctx, e)
		if err != nil {
			t.Fatalf("record %s: %v", e.Action, err)
		}
		if got.ID == 0 || got.At.IsZero() {
			t.Fatalf("record %s: id %d at %v, want both filled", e.Action, got.ID, got.At)
		}
		recorded = append(recorded, got)
	}
	if !recorded[2].At.Equal(at) {
		t.Errorf("explicit At = %v, want %v", recorded[2].At, at)
	}
	if recorded[0].At.Before(before) {
		t.Errorf("default At = %v, want about now", recorded[0].At)
	}

	list, err := s.ListAudit(ctx, 10, 0)
	if err != nil {
		t.Fatalf("list audit: %v", err)
	}
	if len(list) != 3 {
		t.Fatalf("list audit = %d entries, want 3", len(list))
	}
	for i, got := range list {
		want := recorded[len(recorded)-1-i]
		if got.ID != want.ID || !got.At.Equal(want.At) || got.Actor != want.Actor || got.Action != want.Action ||
			got.Outcome != want.Outcome || got.Status != want.Status || got.RequestID != want.RequestID ||
			got.RemoteAddr != want.RemoteAddr || !equalPtr(got.GenerationID, want.GenerationID) {
			t.Errorf("entry %d = %+v, want %+v", i, got, want)
		}
		if (got.Detail == nil) != (want.Detail == nil) || (got.Detail != nil && !spectest.JSONEqual(t, got.Detail, want.Detail)) {
			t.Errorf("entry %d detail = %s, want %s", i, got.Detail, want.Detail)
		}
	}

	page, err := s.ListAudit(ctx, 10, recorded[1].ID)
	if err != nil || len(page) != 1 || page[0].ID != recorded[0].ID {
		t.Errorf("list audit before %d = %+v, %v; want only entry %d", recorded[1].ID, page, err, recorded[0].ID)
	}

	if _, err := s.RecordAudit(ctx, apiv1.AuditEntry{Action: "publish", Outcome: "maybe"}); err == nil {
		t.Error("record with outcome \"maybe\" succeeded, want an error")
	}
}

func TestGatewaysUpsertAndNotify(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes, connects := listen(t, url, db.GatewayNotifyChannel)
	testrun.Recv(t, connects, "listener connect")
	publish(t, s, 1)
	publish(t, s, 2)

	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	applied := time.Date(2025, 1, 2, 3, 5, 0, 0, time.UTC)
	steps := []struct {
		name       string
		in         apiv1.GatewayInstance
		wantNotify bool
		wantGen    int64
	}{
		{name: "new instance", in: apiv1.GatewayInstance{ID: "gw-a", Hostname: "host-a", Listen: ":8080", StartedAt: started}, wantNotify: true},
		{name: "heartbeat", in: apiv1.GatewayInstance{ID: "gw-a", Hostname: "host-a", Listen: ":8080", StartedAt: started}},
		{name: "applied", in: apiv1.GatewayInstance{ID: "gw-a", Hostname: "host-a", Listen: ":8080", StartedAt: started, AppliedGeneration: 1, AppliedAt: applied}, wantNotify: true, wantGen: 1},
		{name: "heartbeat after apply", in: apiv1.GatewayInstance{ID: "gw-a", Hostname: "host-a", Listen: ":8080", AppliedGeneration: 1, AppliedAt: applied}, wantGen: 1},
		{name: "applied again", in: apiv1.GatewayInstance{ID: "gw-a", Hostname: "host-a", Listen: ":8080", AppliedGeneration: 2, AppliedAt: applied}, wantNotify: true, wantGen: 2},
	}
	// Steps run in order on one instance: each depends on the previous.
	for _, st := range steps {
		if err := s.UpsertGateway(ctx, st.in); err != nil {
			t.Fatalf("%s: upsert: %v", st.name, err)
		}
		if st.wantNotify {
			n := testrun.Recv(t, notes, st.name+" notification")
			var got apiv1.GatewayInstance
			if err := json.Unmarshal([]byte(n.payload), &got); err != nil {
				t.Fatalf("%s: payload %q: %v", st.name, n.payload, err)
			}
			if n.channel != db.GatewayNotifyChannel || got.ID != "gw-a" || got.AppliedGeneration != st.wantGen || got.LastHeartbeat.IsZero() {
				t.Errorf("%s: notification %s %+v", st.name, n.channel, got)
			}
		}
		gws, err := s.ListGateways(ctx, true)
		if err != nil || len(gws) != 1 {
			t.Fatalf("%s: list gateways = %+v, %v", st.name, gws, err)
		}
		g := gws[0]
		if g.AppliedGeneration != st.wantGen || g.Hostname != "host-a" || g.Listen != ":8080" ||
			!g.StartedAt.Equal(started) || g.LastHeartbeat.IsZero() {
			t.Errorf("%s: stored %+v", st.name, g)
		}
		if st.wantGen == 0 && !g.AppliedAt.IsZero() || st.wantGen > 0 && !g.AppliedAt.Equal(applied) {
			t.Errorf("%s: applied_at = %v", st.name, g.AppliedAt)
		}
	}

	// A heartbeat notified nothing: a second instance's notification is
	// the next one to arrive.
	if err := s.UpsertGateway(ctx, apiv1.GatewayInstance{ID: "gw-b"}); err != nil {
		t.Fatalf("upsert gw-b: %v", err)
	}
	if n := testrun.Recv(t, notes, "gw-b notification"); !json.Valid([]byte(n.payload)) || !containsID(n.payload, "gw-b") {
		t.Errorf("next notification = %q, want gw-b's", n.payload)
	}
	gws, err := s.ListGateways(ctx, true)
	if err != nil || len(gws) != 2 || gws[0].ID != "gw-a" || gws[1].ID != "gw-b" || gws[1].StartedAt.IsZero() {
		t.Errorf("list gateways = %+v, %v; want gw-a, gw-b", gws, err)
	}

	if err := s.UpsertGateway(ctx, apiv1.GatewayInstance{}); err == nil {
		t.Error("upsert without id succeeded, want an error")
	}
}

func TestGatewayEndpointsRoundTrip(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes, connects := listen(t, url, db.GatewayNotifyChannel)
	testrun.Recv(t, connects, "listener connect")
	publish(t, s, 1)

	up := []apiv1.EndpointState{
		{Upstream: "api", Endpoint: "127.0.0.1:9001", Up: true, InFlight: 3},
		{Upstream: "api", Endpoint: "http://127.0.0.1:9002", Up: true},
	}
	oneDown := []apiv1.EndpointState{
		{Upstream: "api", Endpoint: "127.0.0.1:9001", Up: true},
		{Upstream: "api", Endpoint: "http://127.0.0.1:9002", Up: false, InFlight: 1},
	}
	steps := []struct {
		name       string
		in         apiv1.GatewayInstance
		want       []apiv1.EndpointState
		wantNotify bool
	}{
		{name: "new instance without endpoints", in: apiv1.GatewayInstance{ID: "gw-a"}, want: []apiv1.EndpointState{}, wantNotify: true},
		{name: "applied with endpoints", in: apiv1.GatewayInstance{ID: "gw-a", AppliedGeneration: 1, Endpoints: up}, want: up, wantNotify: true},
		{name: "heartbeat with one down", in: apiv1.GatewayInstance{ID: "gw-a", AppliedGeneration: 1, Endpoints: oneDown}, want: oneDown},
		{name: "heartbeat with an empty list", in: apiv1.GatewayInstance{ID: "gw-a", AppliedGeneration: 1, Endpoints: []apiv1.EndpointState{}}, want: []apiv1.EndpointState{}},
	}
	// Steps run in order on one instance: each replaces the previous list.
	for _, st := range steps {
		if err := s.UpsertGateway(ctx, st.in); err != nil {
			t.Fatalf("%s: upsert: %v", st.name, err)
		}
		if st.wantNotify {
			n := testrun.Recv(t, notes, st.name+" notification")
			var got apiv1.GatewayInstance
			if err := json.Unmarshal([]byte(n.payload), &got); err != nil {
				t.Fatalf("%s: payload %q: %v", st.name, n.payload, err)
			}
			if !slices.Equal(got.Endpoints, st.want) || !strings.Contains(n.payload, `"endpoints":[`) {
				t.Errorf("%s: notification %s, want endpoints %+v", st.name, n.payload, st.want)
			}
		}
		gws, err := s.ListGateways(ctx, true)
		if err != nil || len(gws) != 1 {
			t.Fatalf("%s: list gateways = %+v, %v", st.name, gws, err)
		}
		if got := gws[0].Endpoints; got == nil || !slices.Equal(got, st.want) {
			t.Errorf("%s: stored endpoints %#v, want %+v", st.name, got, st.want)
		}
	}

	// The heartbeats that changed the endpoint states notified nothing: a
	// second instance's notification is the next one to arrive.
	if err := s.UpsertGateway(ctx, apiv1.GatewayInstance{ID: "gw-b"}); err != nil {
		t.Fatalf("upsert gw-b: %v", err)
	}
	if n := testrun.Recv(t, notes, "gw-b notification"); !containsID(n.payload, "gw-b") {
		t.Errorf("next notification = %q, want gw-b's", n.payload)
	}
}

func TestGatewayManyEndpointsNotifyWithoutThem(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	ctx := context.Background()
	notes, connects := listen(t, url, db.GatewayNotifyChannel)
	testrun.Recv(t, connects, "listener connect")
	publish(t, s, 1)

	// 16 upstreams of 64 endpoints: far more than a notification can carry.
	var many []apiv1.EndpointState
	for u := range 16 {
		for e := range 64 {
			many = append(many, apiv1.EndpointState{
				Upstream: fmt.Sprintf("upstream-%02d", u),
				Endpoint: fmt.Sprintf("http://10.0.%d.%d:8080", u, e),
				Up:       e%3 != 0,
				InFlight: int64(e),
			})
		}
	}
	if err := s.UpsertGateway(ctx, apiv1.GatewayInstance{ID: "gw-a", AppliedGeneration: 1, Endpoints: many}); err != nil {
		t.Fatalf("upsert with %d endpoints: %v", len(many), err)
	}
	n := testrun.Recv(t, notes, "notification")
	var got apiv1.GatewayInstance
	if err := json.Unmarshal([]byte(n.payload), &got); err != nil || got.ID != "gw-a" || got.AppliedGeneration != 1 || got.Endpoints == nil || len(got.Endpoints) != 0 {
		t.Errorf("notification %q (%v): want gw-a on generation 1 with an empty endpoint list", n.payload, err)
	}
	gws, err := s.ListGateways(ctx, true)
	if err != nil || len(gws) != 1 || !slices.Equal(gws[0].Endpoints, many) {
		t.Errorf("list gateways: %d instances, %v; want gw-a with all %d endpoints", len(gws), err, len(many))
	}
}

func containsID(payload, id string) bool {
	var g apiv1.GatewayInstance
	return json.Unmarshal([]byte(payload), &g) == nil && g.ID == id
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func TestPingAndConnString(t *testing.T) {
	t.Parallel()
	s, url := dbtest.NewStore(t)
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("ping: %v", err)
	}
	if s.ConnString() != url {
		t.Errorf("conn string = %q, want %q", s.ConnString(), url)
	}
	if _, err := db.Open(context.Background(), "postgres://%zz"); err == nil {
		t.Error("open with a malformed url succeeded")
	}
}

// An instance not heard of for GatewayStaleAfter is stale: listed only
// with all, marked so; PruneGateways deletes those older than the
// retention and no other.
func TestGatewaysStaleAndPruned(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	now := time.Now().UTC()
	for id, beat := range map[string]time.Time{
		"live":  {}, // the database's now
		"stale": now.Add(-time.Minute),
		"gone":  now.Add(-48 * time.Hour),
	} {
		if err := s.UpsertGateway(ctx, apiv1.GatewayInstance{ID: id, LastHeartbeat: beat}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(all bool) map[string]bool {
		t.Helper()
		gws, err := s.ListGateways(ctx, all)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, g := range gws {
			out[g.ID] = g.Stale
		}
		return out
	}
	if got := ids(false); len(got) != 1 || got["live"] {
		t.Errorf("live instances = %v, want only live, not stale", got)
	}
	if got := ids(true); len(got) != 3 || got["live"] || !got["stale"] || !got["gone"] {
		t.Errorf("all instances (id: stale) = %v, want live:false stale:true gone:true", got)
	}
	n, err := s.PruneGateways(ctx, 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("PruneGateways(24h) = %d, %v; want 1 (gone)", n, err)
	}
	if got := ids(true); len(got) != 2 || got["gone"] {
		t.Errorf("after the prune: %v, want live and stale", got)
	}
}
