package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/migrations"
)

// latestVersion is the highest migration version in FS.
func latestVersion(t *testing.T) uint {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.up.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("glob up migrations: %v, %v", names, err)
	}
	var v uint
	for _, n := range names {
		var got uint
		if _, err := fmt.Sscanf(n, "%06d_", &got); err != nil {
			t.Fatalf("migration %s: %v", n, err)
		}
		v = max(v, got)
	}
	return v
}

func connect(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func schemaVersion(t *testing.T, conn *pgx.Conn) (uint, bool) {
	t.Helper()
	var v int64
	var dirty bool
	if err := conn.QueryRow(context.Background(), `SELECT version, dirty FROM schema_migrations`).Scan(&v, &dirty); err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	return uint(v), dirty
}

func TestFilesArePaired(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`^(\d{6}_[a-z0-9_]+)\.(up|down)\.sql$`)
	seen := map[string]int{}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		m := name.FindStringSubmatch(f)
		if m == nil {
			t.Errorf("%s: want NNNNNN_name.up.sql or NNNNNN_name.down.sql", f)
			continue
		}
		seen[m[1]]++
	}
	for base, n := range seen {
		if n != 2 {
			t.Errorf("%s: has %d of its up/down files, want both", base, n)
		}
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t) // migrated already
	ctx := context.Background()
	for i := range 2 {
		if err := db.Migrate(ctx, dbURL); err != nil {
			t.Fatalf("migrate run %d on a current database: %v", i+1, err)
		}
	}
	if v, dirty := schemaVersion(t, connect(t, dbURL)); v != latestVersion(t) || dirty {
		t.Errorf("schema version %d dirty %v, want %d clean", v, dirty, latestVersion(t))
	}
}

func TestMigrateDownThenConcurrentUp(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t)
	ctx := context.Background()

	// Take the database back to empty with the down migrations.
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dbURL)
	u.Scheme = "pgx5"
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		t.Fatalf("open migrate: %v", err)
	}
	if err := m.Down(); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	if serr, derr := m.Close(); serr != nil || derr != nil {
		t.Fatalf("close migrate: %v, %v", serr, derr)
	}
	conn := connect(t, dbURL)
	var tables []string
	rows, _ := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' ORDER BY 1`)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) != 0 {
		t.Fatalf("tables after down = %v, %v; want none", tables, err)
	}

	// Several processes starting at once: the migrate lock serialises them
	// and every one succeeds.
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = db.Migrate(ctx, dbURL) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent migrate %d: %v", i, err)
		}
	}
	if v, dirty := schemaVersion(t, conn); v != latestVersion(t) || dirty {
		t.Errorf("schema version %d dirty %v, want %d clean", v, dirty, latestVersion(t))
	}
	for _, table := range []string{"generations", "audit_log", "canary_events", "gateway_instances"} {
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, "public."+table).Scan(&exists); err != nil || !exists {
			t.Errorf("table %s after migrate up: exists %v, %v", table, exists, err)
		}
	}
}

func TestMigrateRejectsBadURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, url string }{
		{name: "mysql scheme", url: "mysql://root@127.0.0.1/dwara"},
		{name: "unparsable", url: "postgres://%zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := db.Migrate(context.Background(), tt.url); err == nil {
				t.Errorf("Migrate(%q) = nil, want an error", tt.url)
			}
		})
	}
}

func TestGenerationsAreAppendOnly(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t)
	conn := connect(t, dbURL)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO generations (id, spec, action) VALUES (1, '{}', 'create')`); err != nil {
		t.Fatalf("insert: %v", err)
	}

	tests := []struct{ name, sql string }{
		{name: "update", sql: `UPDATE generations SET message = 'rewritten' WHERE id = 1`},
		{name: "update all", sql: `UPDATE generations SET spec = '{"a": 1}'`},
		{name: "delete", sql: `DELETE FROM generations WHERE id = 1`},
		{name: "delete all", sql: `DELETE FROM generations`},
		{name: "truncate", sql: `TRUNCATE generations CASCADE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Sequential: the subtests share one connection.
			_, err := conn.Exec(ctx, tt.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23001" || !strings.Contains(pgErr.Message, "append-only") {
				t.Fatalf("%s = %v, want restrict_violation (23001) saying append-only", tt.sql, err)
			}
		})
	}
	var message string
	var count int
	if err := conn.QueryRow(ctx, `SELECT message, count(*) OVER () FROM generations`).Scan(&message, &count); err != nil || message != "" || count != 1 {
		t.Errorf("generations after refused changes: %q x%d, %v; want the one untouched row", message, count, err)
	}
}

func TestGenerationsConstraints(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t)
	conn := connect(t, dbURL)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO generations (id, spec, action) VALUES (1, '{}', 'create')`); err != nil {
		t.Fatalf("insert: %v", err)
	}
	tests := []struct{ name, sql, code string }{
		{name: "unknown action", sql: `INSERT INTO generations (id, spec, action) VALUES (2, '{}', 'bump')`, code: "23514"},
		{name: "spec not an object", sql: `INSERT INTO generations (id, spec, action) VALUES (2, '[]', 'create')`, code: "23514"},
		{name: "rollback without source", sql: `INSERT INTO generations (id, spec, action, parent_id) VALUES (2, '{}', 'rollback', 1)`, code: "23514"},
		{name: "missing parent", sql: `INSERT INTO generations (id, spec, action, parent_id) VALUES (5, '{}', 'create', 4)`, code: "23503"},
		{name: "missing source", sql: `INSERT INTO generations (id, spec, action, source_id) VALUES (2, '{}', 'rollback', 9)`, code: "23503"},
		{name: "audit outcome", sql: `INSERT INTO audit_log (action, outcome) VALUES ('publish', 'maybe')`, code: "23514"},
		{name: "canary action", sql: `INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action) VALUES (1, 'api', 5, 10, 'jump')`, code: "23514"},
		{name: "gateway endpoints not an array", sql: `INSERT INTO gateway_instances (id, endpoints) VALUES ('gw-a', '{}')`, code: "23514"},
		{name: "gateway endpoints null", sql: `INSERT INTO gateway_instances (id, endpoints) VALUES ('gw-a', NULL)`, code: "23502"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := conn.Exec(ctx, tt.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tt.code {
				t.Fatalf("%s = %v, want SQLSTATE %s", tt.sql, err, tt.code)
			}
		})
	}
	if _, err := conn.Exec(ctx, `INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason)
		VALUES (1, 'api', 5, 10, 'promote', 'error rate 0.001 below 0.01')`); err != nil {
		t.Errorf("insert canary event: %v", err)
	}
}

func TestGatewayEndpointsDefault(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t)
	conn := connect(t, dbURL)
	ctx := context.Background()
	// An instance that reports no endpoint states (as every row did before
	// migration 3) has an empty array.
	var endpoints string
	if err := conn.QueryRow(ctx, `INSERT INTO gateway_instances (id) VALUES ('gw-a') RETURNING endpoints::text`).Scan(&endpoints); err != nil || endpoints != "[]" {
		t.Errorf("endpoints of a new instance = %q, %v; want []", endpoints, err)
	}
}
