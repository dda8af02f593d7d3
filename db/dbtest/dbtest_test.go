package dbtest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testrun"
)

// fakeTB records Cleanup functions and Logf output and reports Failed as
// told, so the drop/keep decision can be tested without failing a test.
type fakeTB struct {
	testing.TB
	failed   bool
	cleanups []func()
	logs     []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Failed() bool      { return f.failed }
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func serverURL() string {
	if u := os.Getenv(dbtest.EnvURL); u != "" {
		return u
	}
	return dbtest.DefaultURL
}

// databaseExists asks the server whether the database of dbURL exists.
func databaseExists(t *testing.T, dbURL string) bool {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, serverURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, strings.TrimPrefix(u.Path, "/")).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func TestNewGivesMigratedIsolatedDatabases(t *testing.T) {
	t.Parallel()
	const n = 4
	urls := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { urls[i] = dbtest.New(t) })
	}
	wg.Wait()

	seen := map[string]bool{}
	ctx := context.Background()
	for i, u := range urls {
		if seen[u] {
			t.Fatalf("database %s handed out twice", u)
		}
		seen[u] = true
		// Each database starts migrated and empty.
		if got := count(t, u); got != 0 {
			t.Fatalf("%s: %d generations in a fresh database, want 0", u, got)
		}
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatalf("connect %s: %v", u, err)
		}
		_, err = conn.Exec(ctx, `INSERT INTO generations (id, spec, action) SELECT g, '{}', 'create' FROM generate_series(1, $1::int) g`, i+1)
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("%s: insert: %v", u, err)
		}
	}
	// Writes stayed in their own database.
	for i, u := range urls {
		if got := count(t, u); got != i+1 {
			t.Errorf("%s: %d generations, want %d", u, got, i+1)
		}
	}
}

func count(t *testing.T, dbURL string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect %s: %v", dbURL, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM generations`).Scan(&n); err != nil {
		t.Fatalf("count generations in %s: %v", dbURL, err)
	}
	return n
}

func TestNewDropsOrKeeps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		failed   bool
		wantKept bool
	}{
		{name: "passed test drops its database", failed: false, wantKept: false},
		{name: "failed test keeps its database", failed: true, wantKept: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeTB{TB: t, failed: tt.failed}
			u := dbtest.New(fake)
			if !databaseExists(t, u) {
				t.Fatalf("database of %s does not exist", u)
			}
			fake.runCleanups()
			if got := databaseExists(t, u); got != tt.wantKept {
				t.Errorf("database exists after cleanup = %v, want %v", got, tt.wantKept)
			}
			if tt.wantKept {
				if len(fake.logs) != 1 || !strings.Contains(fake.logs[0], strings.TrimPrefix(mustPath(t, u), "/")) {
					t.Errorf("logs = %q, want one naming the kept database", fake.logs)
				}
				drop(t, u)
			}
		})
	}
}

func mustPath(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

func drop(t *testing.T, dbURL string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, serverURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := strings.TrimPrefix(mustPath(t, dbURL), "/")
	if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Errorf("drop %s: %v", name, err)
	}
}

// Watch receives what Exec notifies, and its connection is not a
// db.Listener's: ListenerCount and KillListeners see only the Listener, and
// Watch keeps receiving after KillListeners.
func TestConnHelpers(t *testing.T) {
	t.Parallel()
	const channel = "dbtest channel"
	dbURL := dbtest.New(t)
	payloads := dbtest.Watch(t, dbURL, channel)
	dbtest.Exec(t, dbURL, `SELECT pg_notify($1, 'p1')`, channel)
	if got := testrun.Recv(t, payloads, "first notification"); got != "p1" {
		t.Errorf("payload = %q, want p1", got)
	}
	if n := dbtest.ListenerCount(t, dbURL); n != 0 {
		t.Errorf("ListenerCount = %d without a Listener, want 0", n)
	}

	connects := make(chan struct{}, 10)
	l := &db.Listener{
		ConnString: dbURL,
		Channels:   []string{"c"},
		OnConnect: func(context.Context) error {
			connects <- struct{}{}
			return nil
		},
		OnNotify: func(string, string) {},
		Logger:   slog.New(slog.DiscardHandler),
	}
	testrun.Background(t, l.Run)
	testrun.Recv(t, connects, "listener connect")
	if n := dbtest.ListenerCount(t, dbURL); n != 1 {
		t.Errorf("ListenerCount = %d with one Listener, want 1", n)
	}
	if n := dbtest.KillListeners(t, dbURL); n != 1 {
		t.Errorf("KillListeners = %d, want 1", n)
	}
	testrun.Recv(t, connects, "reconnect after KillListeners")
	dbtest.Exec(t, dbURL, `SELECT pg_notify($1, 'p2')`, channel)
	if got := testrun.Recv(t, payloads, "notification after KillListeners"); got != "p2" {
		t.Errorf("payload = %q, want p2", got)
	}
}

// TestContainerPathWithoutDocker: with no Docker engine (as on the CI
// machine), the container path answers an error instead of hanging or
// crashing, so New goes on to explain what to do.
func TestContainerPathWithoutDocker(t *testing.T) {
	if os.Getenv("DOCKER_HOST") != "" {
		t.Skip("DOCKER_HOST is set: a Docker engine may answer")
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Skip("/var/run/docker.sock exists: a Docker engine may answer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testrun.Timeout)
	defer cancel()
	if _, err := dbtest.ContainerURL(ctx); err == nil {
		t.Fatal("containerURL succeeded without a Docker engine")
	}
}
