// Package dbtest gives each test a fresh, migrated PostgreSQL database.
//
// The first call in a process (per migration content) makes sure a template
// database migrated with the embedded migrations exists on the server,
// named after a hash of those migrations; each test then gets a clone of it
// (CREATE DATABASE ... TEMPLATE ...), which takes milliseconds. Template
// creation is guarded by an advisory lock on the server, so parallel tests
// and parallel test binaries share one template safely. NewStore opens a
// db.Store on such a database.
//
// The other helpers work on a test database over a connection of their
// own: Exec runs a statement, ListenerCount and KillListeners count and
// terminate the connections of db.Listener (to test what a process does
// when its LISTEN connection drops), and Watch receives the notifications
// of a channel.
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/migrations"
)

// EnvURL names the environment variable holding the URL of the PostgreSQL
// server the tests use; its database is only used to create and drop the
// test databases. Unset means DefaultURL.
const EnvURL = "DWARA_TEST_DATABASE_URL"

// DefaultURL is the server used when EnvURL is unset.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// templateLockKey is the advisory lock key (on the server's base database)
// held while a template database is created.
const templateLockKey int64 = 0x64776172610002

// setupTimeout bounds creating the template and cloning it.
const setupTimeout = 2 * time.Minute

var (
	templatesMu sync.Mutex
	templates   = map[string]string{} // base URL -> ensured template name
)

// New returns the URL of a fresh database for this test, migrated to the
// latest embedded migration and owned by the test alone. The database is
// dropped when the test and its subtests finish (after the test's own
// Cleanup functions registered later, such as closing a Store), unless the
// test failed: then it is kept and its URL is logged for inspection.
//
// The server comes from EnvURL, else DefaultURL, else (when nothing
// answers there and a Docker engine does) a PostgreSQL container started
// once per test binary with testcontainers-go. When PostgreSQL cannot be
// reached, New fails the test (t.Fatal) saying so; it never skips. New is
// safe to call from parallel tests and from parallel test binaries.
func New(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvURL)
	if base == "" {
		base = DefaultURL
		if !answers("127.0.0.1:5432") {
			// No server where one is expected: a PostgreSQL container, when
			// a Docker engine answers (a laptop whose only PostgreSQL is
			// Docker). Otherwise the failure below explains what to do.
			if u, err := containerURL(context.Background()); err == nil {
				base = u
			} else {
				t.Logf("dbtest: nothing answers at %s and no container could be started: %v", DefaultURL, err)
			}
		}
	}
	baseU, err := url.Parse(base)
	if err != nil || (baseU.Scheme != "postgres" && baseU.Scheme != "postgresql") {
		t.Fatalf("dbtest: %s must be a postgres:// URL", EnvURL)
	}

	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()

	tmpl, err := ensureTemplate(ctx, baseU)
	if err != nil {
		t.Fatalf("dbtest: prepare template database on %s (is PostgreSQL running? set %s to use another server): %v",
			baseU.Redacted(), EnvURL, err)
	}

	name := "dwara_test_" + randomHex(8)
	if err := adminExec(ctx, baseU, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(tmpl)); err != nil {
		t.Fatalf("dbtest: create database %s from %s on %s: %v", name, tmpl, baseU.Redacted(), err)
	}
	dbURL := withDatabase(baseU, name)

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbtest: test failed, keeping its database: %s", dbURL.Redacted())
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, baseU, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("dbtest: drop database %s: %v", name, err)
		}
	})
	return dbURL.String()
}

// NewStore returns a db.Store on a fresh database from New, closed when the
// test ends (before the database is dropped), and that database's URL. It
// fails the test (t.Fatalf) when the store cannot be opened.
func NewStore(t testing.TB) (*db.Store, string) {
	t.Helper()
	dbURL := New(t)
	s, err := db.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("dbtest: open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s, dbURL
}

// ensureTemplate returns the name of the template database for the current
// migrations on the server at base, creating and migrating it when missing.
func ensureTemplate(ctx context.Context, base *url.URL) (string, error) {
	templatesMu.Lock()
	defer templatesMu.Unlock()
	if name, ok := templates[base.String()]; ok {
		return name, nil
	}

	hash, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "dwara_tmpl_" + hash

	conn, err := pgx.Connect(ctx, base.String())
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Session-level lock: released by the unlock below or, if this process
	// dies, when the connection goes away.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("take template lock: %w", err)
	}
	defer func() {
		// Closing the connection releases the lock as well.
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey)
	}()

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}
	if !exists {
		// Build under a temporary name and rename when complete, so a
		// process killed halfway never leaves a half-migrated template.
		building := name + "_build"
		for _, stmt := range []string{
			"DROP DATABASE IF EXISTS " + ident(building) + " WITH (FORCE)",
			"CREATE DATABASE " + ident(building),
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return "", fmt.Errorf("create template %s: %w", name, err)
			}
		}
		if err := db.Migrate(ctx, withDatabase(base, building).String()); err != nil {
			return "", fmt.Errorf("migrate template %s: %w", name, err)
		}
		for _, stmt := range []string{
			"ALTER DATABASE " + ident(building) + " RENAME TO " + ident(name),
			"ALTER DATABASE " + ident(name) + " IS_TEMPLATE true",
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				return "", fmt.Errorf("finish template %s: %w", name, err)
			}
		}
	}
	templates[base.String()] = name
	return name, nil
}

// migrationsHash is a short hash of every embedded migration's name and
// content: a changed migration gets a new template.
func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// adminExec runs one statement on the server's base database.
func adminExec(ctx context.Context, base *url.URL, stmt string) error {
	conn, err := pgx.Connect(ctx, base.String())
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, stmt)
	return err
}

// withDatabase returns base pointing at database name.
func withDatabase(base *url.URL, name string) *url.URL {
	u := *base
	u.Path = "/" + name
	u.RawPath = ""
	return &u
}

func ident(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
