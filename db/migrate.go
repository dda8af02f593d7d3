package db

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// scheme
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dwara/dwara/migrations"
)

// Migrate applies every embedded migration (package migrations) that the
// database at databaseURL has not seen yet. databaseURL is a postgres:// or
// postgresql:// URL (a pgx5:// URL is accepted as is).
//
// Migrate is idempotent: a database that is already current is a success. It
// holds golang-migrate's advisory lock while it works, so several processes
// may call it at the same time on the same database; all but one wait and
// then find nothing to do. When ctx is cancelled Migrate stops after the
// migration in progress and returns ctx's error.
func Migrate(ctx context.Context, databaseURL string) error {
	migrateURL, err := migrateURL(databaseURL)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	src, err := iofs.New(migrations.FS, ".")
	if err != nil {
		return fmt.Errorf("migrate: open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, migrateURL)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer m.Close()

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			m.GracefulStop <- true
		case <-done:
		}
	}()

	err = m.Up()
	if err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrate: up: %w", err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("migrate: %w", ctx.Err())
	}
	return nil
}

// migrateURL turns a postgres:// URL into the pgx5:// form golang-migrate's
// pgx/v5 driver expects.
func migrateURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", redactURLError(err))
	}
	switch u.Scheme {
	case "postgres", "postgresql", "pgx5":
		u.Scheme = "pgx5"
		return u.String(), nil
	default:
		return "", fmt.Errorf("database url: unsupported scheme %q (want postgres://)", u.Scheme)
	}
}

// redactURLError drops the URL (which may hold a password) from a url.Parse
// error.
func redactURLError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}
