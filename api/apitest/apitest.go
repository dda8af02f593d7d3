// Package apitest serves a real API over a fresh database for the tests of
// the API's clients.
package apitest

import (
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
)

// Start serves the API (token "" means no auth) over a fresh database from
// dbtest on 127.0.0.1 and returns its base URL and store. Both are closed
// when the test ends.
func Start(t *testing.T, token string) (string, *db.Store) {
	t.Helper()
	return StartWith(t, api.Options{Token: token})
}

// StartWith is Start with the API's options o (a read token, allowed
// hosts, a database timeout...). o.Store is replaced by the fresh
// database's store; a nil o.Logger discards the logs.
func StartWith(t *testing.T, o api.Options) (string, *db.Store) {
	t.Helper()
	store, _ := dbtest.NewStore(t)
	o.Store = store
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	srv := api.New(o)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL, store
}
