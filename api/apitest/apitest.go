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
	store, _ := dbtest.NewStore(t)
	srv := api.New(api.Options{Store: store, Token: token, Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL, store
}
