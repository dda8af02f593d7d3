package api

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testnet"
)

// storeAt opens a Store on a server at addr that need not answer.
func storeAt(t *testing.T, addr string) *db.Store {
	t.Helper()
	s, err := db.Open(context.Background(), fmt.Sprintf("postgres://dwara@%s/dwara?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// unavailableCalls are calls of every kind that need the database.
var unavailableCalls = []call{
	{method: "GET", path: "/api/v1/generations"},
	{method: "GET", path: "/api/v1/generations/current"},
	{method: "GET", path: "/api/v1/generations/1"},
	{method: "GET", path: "/api/v1/audit"},
	{method: "GET", path: "/api/v1/gateways"},
	{method: "GET", path: "/api/v1/canary"},
	{method: "GET", path: "/api/v1/canary/events"},
	{method: "POST", path: "/api/v1/services/api/flip"},
	{method: "PUT", path: "/api/v1/services/api/weights", body: map[string]any{"weights": map[string]int{"a": 1}}},
	{method: "POST", path: "/api/v1/generations", body: map[string]any{"spec": specWith(90, 10)}},
	{method: "POST", path: "/api/v1/generations/1/rollback"},
	{method: "POST", path: "/api/v1/services/api/canary/pause"},
	{method: "POST", path: "/api/v1/services/api/canary/adopt"},
}

// checkUnavailable makes every call of unavailableCalls and /readyz and
// wants 503 problem+json with Retry-After: 5 from each.
func checkUnavailable(t *testing.T, e *env) {
	t.Helper()
	for _, c := range append(unavailableCalls, call{method: "GET", path: "/readyz"}) {
		r := e.do(c)
		if r.status != http.StatusServiceUnavailable {
			t.Errorf("%s %s: status %d, want 503; body %s", c.method, c.path, r.status, r.body)
			continue
		}
		p := r.problem(t)
		if r.header.Get("Retry-After") != "5" || p.Status != http.StatusServiceUnavailable {
			t.Errorf("%s %s: Retry-After %q, problem %+v", c.method, c.path, r.header.Get("Retry-After"), p)
		}
		if strings.Contains(string(r.body), "refused") || strings.Contains(string(r.body), "127.0.0.1") {
			t.Errorf("%s %s: the 503 shows its cause: %s", c.method, c.path, r.body)
		}
	}
}

// A database that refuses connections (stopped) is a 503 with Retry-After
// on every call, never a 500.
func TestDatabaseStopped(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	var logs testlog.Buffer
	e := newEnvOn(t, storeAt(t, addr), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	checkUnavailable(t, e)
	if !strings.Contains(logs.String(), "database unavailable") || !strings.Contains(logs.String(), "refused") {
		t.Errorf("the log does not have the cause: %s", logs.String())
	}
}

// A database that accepts connections and never answers (hung, or its
// process stopped) is a 503 within the database timeout on every call,
// never a hang. The test waits as long as it takes (the client's deadline
// is a minute); what it asserts is that the calls return, with 503.
func TestDatabaseHung(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, storeAt(t, testnet.HungAddr(t)), Options{DatabaseTimeout: 300 * time.Millisecond})
	e.client.Timeout = time.Minute
	checkUnavailable(t, e)
}
