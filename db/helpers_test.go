package db_test

import (
	"github.com/dwara/dwara/api/apiv1"

	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// waitTimeout bounds every wait for a signal in these tests.
const waitTimeout = 15 * time.Second

// newStore returns a Store on a fresh database, and that database's URL.
func newStore(t *testing.T) (*db.Store, string) {
	t.Helper()
	url := dbtest.New(t)
	s, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s, url
}

// spec returns a small generation spec whose content depends on n.
func spec(n int) json.RawMessage {
	name := fmt.Sprintf("u%d", n)
	return spectest.New().Upstream(name, fmt.Sprintf("127.0.0.1:%d", 9000+n)).Route("s", "/", name).JSON()
}

func ptr[T any](v T) *T { return &v }

// recv waits for one value from ch, failing the test after waitTimeout.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		panic("unreachable")
	}
}

func publish(t *testing.T, s *db.Store, n int) apiv1.Generation {
	t.Helper()
	g, err := s.Publish(context.Background(), db.PublishParams{Spec: spec(n), Action: apiv1.ActionCreate, Author: "test", Message: fmt.Sprint("publish ", n)})
	if err != nil {
		t.Fatalf("publish %d: %v", n, err)
	}
	return g
}

// note is one received notification.
type note struct{ channel, payload string }

// listen runs a Listener on channels until the test ends. It returns the
// notifications and a channel that receives once per (re)connect.
func listen(t *testing.T, url string, channels ...string) (<-chan note, <-chan struct{}) {
	t.Helper()
	notes := make(chan note, 1000)
	connects := make(chan struct{}, 100)
	l := &db.Listener{
		ConnString: url,
		Channels:   channels,
		OnConnect: func(context.Context) error {
			connects <- struct{}{}
			return nil
		},
		OnNotify: func(channel, payload string) { notes <- note{channel, payload} },
		Logger:   testLogger(t, nil),
	}
	runInBackground(t, l.Run)
	return notes, connects
}

// runInBackground runs run until the test ends, then cancels it and checks
// that it returned nil in time.
func runInBackground(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v after cancel, want nil", err)
			}
		case <-time.After(waitTimeout):
			t.Errorf("run did not return within %v of cancel", waitTimeout)
		}
	})
}

// testLogger logs to the test's output and, when msgs is non-nil, also sends
// each record's message to msgs (dropping it if msgs is full).
func testLogger(t *testing.T, msgs chan<- string) *slog.Logger {
	h := slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(&signalHandler{Handler: h, msgs: msgs})
}

type signalHandler struct {
	slog.Handler
	msgs chan<- string
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.msgs != nil {
		select {
		case h.msgs <- r.Message:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithAttrs(as), msgs: h.msgs}
}

func (h *signalHandler) WithGroup(name string) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithGroup(name), msgs: h.msgs}
}

// waitMessage waits until a log record with message msg arrives on msgs.
func waitMessage(t *testing.T, msgs <-chan string, msg string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case m := <-msgs:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for log %q", waitTimeout, msg)
		}
	}
}

// exec runs one statement on its own connection to url.
func exec(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// killListeners terminates every dwara-listener backend of url's database
// and returns how many there were.
func killListeners(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE application_name = 'dwara-listener' AND datname = current_database()`).Scan(&n)
	if err != nil {
		t.Fatalf("terminate listener backends: %v", err)
	}
	return n
}

// dbtestURL returns a fresh database's URL.
func dbtestURL(t *testing.T) string {
	t.Helper()
	return dbtest.New(t)
}
