package db

import "context"

// Setting returns the value of the session setting name (SHOW) on one of
// the pool's connections, for the tests of Open's session settings.
func Setting(ctx context.Context, s *Store, name string) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v)
	return v, err
}
