package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
)

// counterSpec is a spec whose content is the counter n (in its upstream's
// name), and counterOf reads n back from a generation.
func counterSpec(n int) json.RawMessage { return spec(n) }

func counterOf(t *testing.T, g apiv1.Generation) int {
	t.Helper()
	var s struct {
		Upstreams []struct{ Name string } `json:"upstreams"`
	}
	if err := json.Unmarshal(g.Spec, &s); err != nil || len(s.Upstreams) != 1 {
		t.Fatalf("generation %d spec %s: %v", g.ID, g.Spec, err)
	}
	var n int
	if _, err := fmt.Sscanf(s.Upstreams[0].Name, "u%d", &n); err != nil {
		t.Fatalf("generation %d: upstream %q", g.ID, s.Upstreams[0].Name)
	}
	return n
}

// Concurrent edits serialise: each one reads the result of the one before,
// so 50 increments of a counter in the spec end at 50, in 50 consecutive
// generations, with no error and no retry.
func TestEditSerialisesConcurrentEdits(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	publish(t, s, 0)

	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	ids := make([]int64, n)
	for i := range n {
		wg.Go(func() {
			g, err := s.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
				var spec struct {
					Upstreams []struct{ Name string } `json:"upstreams"`
				}
				if err := json.Unmarshal(cur.Spec, &spec); err != nil {
					return db.PublishParams{}, err
				}
				var k int
				fmt.Sscanf(spec.Upstreams[0].Name, "u%d", &k)
				return db.PublishParams{Spec: counterSpec(k + 1), Action: apiv1.ActionFlip, Author: "test"}, nil
			})
			ids[i], errs[i] = g.ID, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("edit %d: %v", i, err)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if id != int64(i+2) {
			t.Fatalf("sorted ids = %v, want 2..%d", ids, n+1)
		}
	}
	cur, err := s.Current(ctx)
	if err != nil || cur.ID != n+1 || counterOf(t, cur) != n || cur.Action != apiv1.ActionFlip {
		t.Fatalf("current = %d (action %s), %v; want %d with counter %d", cur.ID, cur.Action, err, n+1, n)
	}
}

func TestEdit(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()

	// No generation yet: edit sees the zero Generation.
	errRefused := errors.New("refused by the edit")
	_, err := s.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
		if cur.ID != 0 || cur.Spec != nil {
			t.Errorf("active = %+v, want the zero Generation", cur)
		}
		return db.PublishParams{}, errRefused
	})
	if !errors.Is(err, errRefused) || errors.Is(err, db.ErrUnavailable) {
		t.Errorf("edit error = %v, want the edit's own", err)
	}
	if _, err := s.Current(ctx); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("a refused edit stored something: %v", err)
	}

	g1 := publish(t, s, 1)
	g, err := s.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
		if cur.ID != g1.ID || counterOf(t, cur) != 1 {
			t.Errorf("active = %d, want %d with its spec", cur.ID, g1.ID)
		}
		return db.PublishParams{Spec: cur.Spec, Action: apiv1.ActionKill}, nil
	})
	if err != nil || !g.Unchanged || g.ID != g1.ID {
		t.Errorf("edit to the same spec = %+v, %v; want generation %d unchanged", g, err, g1.ID)
	}
	_, err = s.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
		return db.PublishParams{Spec: spec(2), IfMatch: ptr(int64(7))}, nil
	})
	if !errors.Is(err, db.ErrPreconditionFailed) {
		t.Errorf("edit with a stale IfMatch: %v, want ErrPreconditionFailed", err)
	}
	_, err = s.Edit(ctx, func(cur apiv1.Generation) (db.PublishParams, error) {
		return db.PublishParams{Spec: spec(2), Action: "explode"}, nil
	})
	if err == nil || !strings.Contains(err.Error(), "explode") {
		t.Errorf("edit with an unknown action: %v", err)
	}
}

// Whatever a refused call carried, its audit entry can be written:
// NUL characters and invalid UTF-8 in every text field and in the detail
// (keys and values), overlong strings and huge lists.
func TestRecordAuditSanitises(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	weights := map[string]int{}
	for i := range 500 {
		weights[fmt.Sprintf("t\x00%03d", i)] = i
	}
	detail, err := json.Marshal(map[string]any{
		"message":     "a\x00b\xffc",
		"service\x00": "s\x00",
		"long":        strings.Repeat("x", 5000),
		"weights":     weights,
		"nested":      []any{[]any{[]any{[]any{[]any{[]any{[]any{[]any{[]any{"deep"}}}}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.RecordAudit(ctx, apiv1.AuditEntry{
		Actor: "mal\x00lory\xff", Action: "flip\x00", Outcome: apiv1.OutcomeRefused, Status: 400,
		RequestID: "r\x00", ClientRequestID: strings.Repeat("c", 1000), RemoteAddr: "1.2.3.4:5\x00",
		Detail: detail,
	})
	if err != nil {
		t.Fatalf("record: %v", err)
	}
	list, err := s.ListAudit(ctx, 1, 0)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %v, %v", list, err)
	}
	got := list[0]
	for name, v := range map[string]string{"actor": got.Actor, "action": got.Action, "request_id": got.RequestID,
		"client_request_id": got.ClientRequestID, "remote_addr": got.RemoteAddr, "detail": string(got.Detail)} {
		if strings.ContainsRune(v, 0) || !utf8.ValidString(v) || strings.Contains(v, `\u0000`) {
			t.Errorf("%s = %q: still holds NUL or invalid UTF-8", name, v)
		}
	}
	if got.Actor != "mal\u2400lory\uFFFD" || got.ID != e.ID || got.Count != 1 {
		t.Errorf("entry = %+v", got)
	}
	if n := utf8.RuneCountInString(got.ClientRequestID); n != 256 {
		t.Errorf("client_request_id has %d characters, want it cut to 256", n)
	}
	var d map[string]any
	if err := json.Unmarshal(got.Detail, &d); err != nil {
		t.Fatal(err)
	}
	if d["message"] != "a\u2400b\uFFFDc" || d["service\u2400"] != "s\u2400" {
		t.Errorf("detail = %v", d)
	}
	if n := utf8.RuneCountInString(d["long"].(string)); n != 2048 {
		t.Errorf("long string has %d characters, want it cut to 2048", n)
	}
	if w := d["weights"].(map[string]any); len(w) != 101 || w["…"] != float64(400) {
		t.Errorf("weights kept %d members (… = %v), want 100 and the count of the others", len(w), w["…"])
	}
	if !strings.Contains(string(got.Detail), `"…"`) || strings.Contains(string(got.Detail), "deep") {
		t.Errorf("nesting beyond 8 levels was kept: %s", got.Detail)
	}

	// Not an object, and not JSON at all.
	for _, raw := range []string{`[1, 2]`, `"text"`, "not json \x00"} {
		if _, err := s.RecordAudit(ctx, apiv1.AuditEntry{Action: "flip", Outcome: apiv1.OutcomeRefused, Detail: json.RawMessage(raw)}); err != nil {
			t.Errorf("record with detail %q: %v", raw, err)
		}
	}
}

func TestAuditCount(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	ctx := context.Background()
	e, err := s.RecordAudit(ctx, apiv1.AuditEntry{Action: "flip", Outcome: apiv1.OutcomeRefused, Status: 401, ClientRequestID: "c-1"})
	if err != nil || e.Count != 1 {
		t.Fatalf("record = %+v, %v; want count 1", e, err)
	}
	if err := s.AddAuditCount(ctx, e.ID, 4); err != nil {
		t.Fatal(err)
	}
	if err := s.AddAuditCount(ctx, e.ID+100, 1); !errors.Is(err, db.ErrNotFound) {
		t.Errorf("add to a missing entry: %v, want ErrNotFound", err)
	}
	if err := s.AddAuditCount(ctx, e.ID, 0); err == nil {
		t.Error("add 0: no error")
	}
	list, err := s.ListAudit(ctx, 10, 0)
	if err != nil || len(list) != 1 || list[0].Count != 5 || list[0].ClientRequestID != "c-1" {
		t.Errorf("list = %+v, %v; want one entry with count 5 and client_request_id c-1", list, err)
	}
}
