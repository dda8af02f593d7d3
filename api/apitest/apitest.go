// Package apitest serves a real API over a fresh database for the tests of
// the API's clients.
package apitest

import (
	"crypto/tls"
	"io"
	"log"
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
	return serve(t, o, store, nil)
}

// StartTLS is Start serving HTTPS with the certificate cert (for example
// one of internal/testcert, whose PEM a client then trusts): the API as a
// TLS serve answers it.
func StartTLS(t *testing.T, token string, cert tls.Certificate) (string, *db.Store) {
	t.Helper()
	store, _ := dbtest.NewStore(t)
	return serve(t, api.Options{Token: token, Store: store, Logger: slog.New(slog.DiscardHandler)}, store, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

// serve serves the API of o on 127.0.0.1, over TLS with tc when it is not
// nil, until the test ends.
func serve(t *testing.T, o api.Options, store *db.Store, tc *tls.Config) (string, *db.Store) {
	t.Helper()
	srv := api.New(o)
	ts := httptest.NewUnstartedServer(srv.Handler())
	// A client that does not trust the certificate is a case the tests
	// make on purpose: its handshake error is not news.
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	if tc != nil {
		ts.TLS = tc
		ts.StartTLS()
	} else {
		ts.Start()
	}
	t.Cleanup(ts.Close)
	return ts.URL, store
}
