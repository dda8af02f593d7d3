package db_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testnet"
)

// openAt opens a Store on the server at addr (which need not answer).
func openAt(t *testing.T, addr, query string) *db.Store {
	t.Helper()
	s, err := db.Open(context.Background(), fmt.Sprintf("postgres://dwara@%s/dwara?sslmode=disable%s", addr, query))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Every call on a database that refuses connections fails with
// ErrUnavailable, never with a bare network error.
func TestUnavailableWhenRefused(t *testing.T) {
	t.Parallel()
	s := openAt(t, testnet.ClosedAddr(t), "")
	ctx := context.Background()
	calls := map[string]func() error{
		"ping":    func() error { return s.Ping(ctx) },
		"current": func() error { _, err := s.Current(ctx); return err },
		"get":     func() error { _, err := s.Get(ctx, 1); return err },
		"list":    func() error { _, err := s.List(ctx, 10, 0); return err },
		"publish": func() error {
			_, err := s.Publish(ctx, db.PublishParams{Spec: spec(1)})
			return err
		},
		"edit": func() error {
			_, err := s.Edit(ctx, func(apiv1.Generation) (db.PublishParams, error) { return db.PublishParams{Spec: spec(1)}, nil })
			return err
		},
		"record audit": func() error {
			_, err := s.RecordAudit(ctx, apiv1.AuditEntry{Action: "flip", Outcome: apiv1.OutcomeRefused})
			return err
		},
		"add audit count": func() error { return s.AddAuditCount(ctx, 1, 1) },
		"list audit":      func() error { _, err := s.ListAudit(ctx, 10, 0); return err },
		"list gateways":   func() error { _, err := s.ListGateways(ctx, true); return err },
		"upsert gateway":  func() error { return s.UpsertGateway(ctx, apiv1.GatewayInstance{ID: "gw"}) },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, db.ErrUnavailable) || !db.IsUnavailable(err) {
			t.Errorf("%s: %v, want ErrUnavailable", name, err)
		}
	}
}

// A server that accepts connections and never answers costs a caller
// without a deadline at most the connect timeout, and one with a deadline
// at most that deadline: both get ErrUnavailable. (The test asserts that
// the calls return, and what they return, not how fast.)
func TestUnavailableWhenHung(t *testing.T) {
	t.Parallel()
	s := openAt(t, testnet.HungAddr(t), "&connect_timeout=1")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := s.Current(ctx); !errors.Is(err, db.ErrUnavailable) {
		t.Errorf("current with a deadline: %v, want ErrUnavailable", err)
	}
	// No deadline: the connect timeout (1 s from the URL here) ends it.
	if err := s.Ping(context.Background()); !errors.Is(err, db.ErrUnavailable) {
		t.Errorf("ping without a deadline: %v, want ErrUnavailable", err)
	}
}

// Without connect_timeout in the URL, Open bounds connecting by
// DefaultConnectTimeout.
func TestOpenBoundsConnecting(t *testing.T) {
	t.Parallel()
	s := openAt(t, testnet.HungAddr(t), "")
	done := make(chan error, 1)
	go func() { done <- s.Ping(context.Background()) }()
	select {
	case err := <-done:
		if !errors.Is(err, db.ErrUnavailable) {
			t.Errorf("ping: %v, want ErrUnavailable", err)
		}
	case <-time.After(db.DefaultConnectTimeout + time.Minute):
		t.Fatalf("ping of a hung server without a deadline did not return within %s", db.DefaultConnectTimeout+time.Minute)
	}
}

// Open's sessions run with a statement_timeout and an
// idle_in_transaction_session_timeout, unless the URL sets its own; no
// lock_timeout, which would refuse a publish waiting for the publish lock.
func TestOpenSessionSettings(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewStore(t)
	ctx := context.Background()
	check := func(s *db.Store, name, want string) {
		t.Helper()
		got, err := db.Setting(ctx, s, name)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	s, err := db.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	check(s, "statement_timeout", "30s")
	check(s, "idle_in_transaction_session_timeout", "1min")
	check(s, "lock_timeout", "0")

	own, err := db.Open(ctx, url+"&statement_timeout=7000&idle_in_transaction_session_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	check(own, "statement_timeout", "7s")
	check(own, "idle_in_transaction_session_timeout", "0")
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"the sentinel, wrapped", fmt.Errorf("x: %w", db.ErrUnavailable), true},
		{"deadline", fmt.Errorf("query: %w", context.DeadlineExceeded), true},
		{"cancelled", context.Canceled, false},
		{"no rows", pgx.ErrNoRows, false},
		{"not found", db.ErrNotFound, false},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"crash shutdown", &pgconn.PgError{Code: "57P02"}, true},
		{"starting up", &pgconn.PgError{Code: "57P03"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"statement timeout", &pgconn.PgError{Code: "57014"}, true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"invalid text", &pgconn.PgError{Code: "22021"}, false},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"plain", errors.New("boom"), false},
	}
	for _, tt := range tests {
		if got := db.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("%s: IsUnavailable(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}

// A wrong password is a configuration error, not an outage: the server
// answered.
func TestWrongPasswordIsNotUnavailable(t *testing.T) {
	t.Parallel()
	_, url := dbtest.NewStore(t)
	s, err := db.Open(context.Background(), url+"&user=dwara_no_such_role")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Ping(context.Background())
	if err == nil || db.IsUnavailable(err) {
		t.Errorf("ping as an unknown role: %v; want an error that is not ErrUnavailable", err)
	}
}

// A connection pgx has closed ("conn closed": a pooled connection the
// server dropped, met again by the next statement of the call) is the
// database being away, not a failure of the call: the API answers 503.
func TestUnavailableWhenConnClosed(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(context.Background(), "SELECT 1")
	if !errors.Is(err, pgconn.ErrConnClosed) {
		t.Fatalf("Exec on a closed connection: %v, want pgconn.ErrConnClosed", err)
	}
	if !db.IsUnavailable(err) {
		t.Errorf("IsUnavailable(%v) = false, want true", err)
	}
	if wrapped := fmt.Errorf("edit generation: %w", err); !db.IsUnavailable(wrapped) {
		t.Errorf("IsUnavailable(%v) = false, want true", wrapped)
	}
}
