package dbtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
)

// watchApplicationName is the application_name of Watch's connections, so
// that ListenerCount and KillListeners leave them alone.
const watchApplicationName = "dwara-test"

// Exec runs one statement with args on a connection of its own to the
// database at url, and fails the test (t.Fatalf) when it cannot.
func Exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("dbtest: exec %q: %v", sql, err)
	}
}

// ListenerCount returns how many db.Listener connections (application_name
// db.ListenerApplicationName) the database at url has.
func ListenerCount(t testing.TB, url string) int {
	t.Helper()
	return queryInt(t, url, `
		SELECT count(*)
		FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, db.ListenerApplicationName)
}

// KillListeners terminates every db.Listener connection of the database at
// url (its backend ends, as when the server restarts or a proxy drops it)
// and returns how many it terminated. Other connections, Watch's included,
// are left alone.
func KillListeners(t testing.TB, url string) int {
	t.Helper()
	return queryInt(t, url, `
		SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, db.ListenerApplicationName)
}

// Watch LISTENs on channel of the database at url over a plain connection
// of its own (not a db.Listener, so KillListeners and ListenerCount leave
// it alone) until the test ends, and returns the payloads of the
// notifications in the order they arrive. It returns once listening, so
// every notification sent after it returns is received. The channel holds
// 1000 payloads; Watch blocks on a full one until the test ends.
func Watch(t testing.TB, url, channel string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		cancel()
		t.Fatalf("dbtest: parse url: %v", err)
	}
	cfg.RuntimeParams["application_name"] = watchApplicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("dbtest: connect: %v", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+ident(channel)); err != nil {
		cancel()
		conn.Close(context.Background())
		t.Fatalf("dbtest: listen %s: %v", channel, err)
	}
	payloads := make(chan string, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("dbtest: watch %s: %v", channel, err)
				}
				return
			}
			select {
			case payloads <- n.Payload:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return payloads
}

// connect opens a connection to url for one helper; the caller closes it.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("dbtest: connect: %v", err)
	}
	return conn
}

// queryInt runs a query that returns one integer on a connection of its
// own to url.
func queryInt(t testing.TB, url, sql string, args ...any) int {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("dbtest: query %q: %v", sql, err)
	}
	return n
}
