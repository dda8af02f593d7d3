package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnsureDatabase creates the database named in databaseURL when it does not
// exist yet, connecting to the server's "postgres" database to do so. It is
// what lets `make run` work on a fresh server. A database that exists, or one
// created concurrently by another process, is a success.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("ensure database: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("ensure database %q: %w", cfg.Database, err)
	}
	name := cfg.Database
	admin := cfg.Copy()
	admin.Database = "postgres"
	conn, err = pgx.ConnectConfig(ctx, admin)
	if err != nil {
		return fmt.Errorf("ensure database %q: connect to create it: %w", name, err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database
		return fmt.Errorf("ensure database %q: create: %w", name, err)
	}
	return nil
}
