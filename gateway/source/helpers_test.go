package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/source"
)

// wait bounds every wait for a signal in these tests. A passing test never
// waits this long; it is generous so that a loaded machine running -race
// never reaches it.
const wait = 30 * time.Second

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

// spec returns a valid generation spec whose upstream is named after n.
func spec(n int) json.RawMessage {
	name := fmt.Sprintf("u%d", n)
	return spectest.New().Upstream(name, fmt.Sprintf("127.0.0.1:%d", 9000+n)).Route("web", "", name).JSON()
}

// publishSpec stores js as a new generation.
func publishSpec(t *testing.T, s *db.Store, js json.RawMessage) apiv1.Generation {
	t.Helper()
	g, err := s.Publish(context.Background(), db.PublishParams{Spec: js, Action: apiv1.ActionCreate, Author: "test", Message: "test"})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return g
}

// publish stores spec(n) as a new generation.
func publish(t *testing.T, s *db.Store, n int) apiv1.Generation {
	t.Helper()
	return publishSpec(t, s, spec(n))
}

// recv waits for one value from ch, failing the test after wait.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("timed out after %v waiting for %s", wait, what)
		panic("unreachable")
	}
}

// note is one received notification.
type note struct{ channel, payload string }

// follow runs a db.Listener on db.NotifyChannel that notifies src on every
// (re)connect and every notification, as a process does, until the test
// ends. It returns a channel that receives once per (re)connect.
func follow(t *testing.T, url string, src *source.Database) <-chan struct{} {
	t.Helper()
	connects := make(chan struct{}, 100)
	l := &db.Listener{
		ConnString: url,
		Channels:   []string{db.NotifyChannel},
		OnConnect: func(context.Context) error {
			src.Notify()
			connects <- struct{}{}
			return nil
		},
		OnNotify: func(string, string) { src.Notify() },
		Logger:   testLogger(t, nil),
	}
	runInBackground(t, l.Run)
	return connects
}

// runInBackground runs run until the test ends, then cancels it and checks
// that it returned nil.
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
		case <-time.After(wait):
			t.Errorf("run did not return within %v of cancel", wait)
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
	deadline := time.After(wait)
	for {
		select {
		case m := <-msgs:
			if m == msg {
				return
			}
		case <-deadline:
			t.Fatalf("timed out after %v waiting for log %q", wait, msg)
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

// killListeners terminates every db.Listener backend of url's database and
// returns how many there were.
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
		WHERE application_name = $1 AND datname = current_database()`, db.ListenerApplicationName).Scan(&n)
	if err != nil {
		t.Fatalf("terminate listener backends: %v", err)
	}
	return n
}

// watch LISTENs on channel over a plain connection (application_name
// dwara-test, so killListeners leaves it alone) until the test ends. It
// returns once listening.
func watch(t *testing.T, url, channel string) <-chan note {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse url: %v", err)
	}
	cfg.RuntimeParams["application_name"] = "dwara-test"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatalf("listen %s: %v", channel, err)
	}
	notes := make(chan note, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("watch %s: %v", channel, err)
				}
				return
			}
			notes <- note{n.Channel, n.Payload}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return notes
}

// safeList is a slice appended to from several goroutines.
type safeList[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *safeList[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
}

func (l *safeList[T]) snapshot() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.items...)
}
