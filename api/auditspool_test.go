package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// relayedStore opens a Store on a fresh database through a relay the test
// can cut (the database gone, its connections closed under the pool) and
// restore; it returns the store, the relay and the database's own URL.
func relayedStore(t *testing.T) (*db.Store, *testnet.Relay, string) {
	t.Helper()
	direct := dbtest.New(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	relay := testnet.NewRelay(t, u.Host)
	u.Host = relay.Addr()
	s, err := db.Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, relay, direct
}

// A database whose connections are cut under the pool (as a restart does:
// pgx then says "conn closed" of a connection it had) is a 503 with
// Retry-After on every call, the gateway reports included, never a 500.
func TestDatabaseConnectionsCut(t *testing.T) {
	t.Parallel()
	store, relay, _ := relayedStore(t)
	e := newEnvOn(t, store, Options{})
	e.publish(specWith(90, 10), "before the cut")
	e.do(call{method: "PUT", path: "/api/v1/gateways/gw-1", body: gatewayReport("gw-1", 1)}).want(t, http.StatusNoContent)
	relay.Cut()
	checkUnavailable(t, e)
	r := e.do(call{method: "PUT", path: "/api/v1/gateways/gw-1", body: gatewayReport("gw-1", 1)})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
		t.Errorf("PUT /api/v1/gateways/gw-1 with the database cut: %d (Retry-After %q), want 503 with Retry-After; body %s",
			r.status, r.header.Get("Retry-After"), r.body)
	}
}

// The audit entries of calls made while the database is away are kept,
// logged at WARN, counted, and written in order with their own times once
// it is back; none is lost.
func TestAuditSpooledWhileDatabaseAway(t *testing.T) {
	t.Parallel()
	store, relay, direct := relayedStore(t)
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	e := newEnvOn(t, store, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Registerer: reg})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- e.srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	e.publish(specWith(90, 10), "before the cut")

	relay.Cut()
	calls := []call{
		{method: "POST", path: "/api/v1/services/api/flip", body: map[string]any{"message": "away 1"}},
		{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"stable": 50, "canary": 50}}},
		{method: "POST", path: "/api/v1/services/api/flip", body: map[string]any{"message": "away 3"}},
	}
	for _, c := range calls {
		if r := e.do(c); r.status != http.StatusServiceUnavailable {
			t.Fatalf("%s %s with the database away: %d, want 503; body %s", c.method, c.path, r.status, r.body)
		}
	}
	if n := testutil.ToFloat64(e.srv.spool.entries); n != float64(len(calls)) {
		t.Errorf("dwara_audit_spool_entries = %v with the database away, want %d", n, len(calls))
	}
	if got := strings.Count(logs.String(), `"msg":"database away: audit entry kept until it is back"`); got != len(calls) {
		t.Errorf("%d WARN lines for the kept entries, want %d:\n%s", got, len(calls), logs.String())
	}

	relay.Restore()
	testrun.Eventually(t, "the spooled entries written", func() bool {
		return testutil.ToFloat64(e.srv.spool.written) == float64(len(calls))
	})
	if n := testutil.ToFloat64(e.srv.spool.entries); n != 0 {
		t.Errorf("dwara_audit_spool_entries = %v after the database came back, want 0", n)
	}
	check, err := db.Open(context.Background(), direct)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	entries, err := check.ListAudit(context.Background(), 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Newest first: the three spooled entries, then the publish.
	if len(entries) < len(calls)+1 {
		t.Fatalf("%d audit entries, want at least %d: %+v", len(entries), len(calls)+1, entries)
	}
	var got []apiv1.AuditEntry
	for i := len(calls) - 1; i >= 0; i-- {
		got = append(got, entries[i])
	}
	wantActions := []string{"flip", "weights", "flip"}
	for i, en := range got {
		if en.Status != http.StatusServiceUnavailable || en.Outcome != apiv1.OutcomeRefused || !strings.Contains(en.Action, wantActions[i]) {
			t.Errorf("spooled entry %d: %s %s %d, want a refused %s answered 503", i, en.Action, en.Outcome, en.Status, wantActions[i])
		}
		if i > 0 && en.At.Before(got[i-1].At) {
			t.Errorf("spooled entry %d at %v is before entry %d at %v: the order or the times were lost", i, en.At, i-1, got[i-1].At)
		}
	}
	if got[0].At.Before(entries[len(calls)].At) {
		t.Errorf("the first spooled entry (%v) is before the publish made before the cut (%v)", got[0].At, entries[len(calls)].At)
	}
}

// A full spool drops what does not fit, counts and logs it.
func TestAuditSpoolFull(t *testing.T) {
	t.Parallel()
	store, relay, _ := relayedStore(t)
	var logs testlog.Buffer
	e := newEnvOn(t, store, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), AuditSpoolSize: 1})
	e.publish(specWith(90, 10), "before the cut")
	relay.Cut()
	for range 2 {
		e.do(call{method: "POST", path: "/api/v1/services/api/flip"}).want(t, http.StatusServiceUnavailable)
	}
	if n := testutil.ToFloat64(e.srv.spool.dropped); n != 1 {
		t.Errorf("dwara_audit_spool_dropped_total = %v, want 1", n)
	}
	if !strings.Contains(logs.String(), "audit spool full: audit entry lost") {
		t.Errorf("no log of the lost entry:\n%s", logs.String())
	}
}
