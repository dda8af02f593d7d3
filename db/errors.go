package db

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// IsUnavailable reports whether err means that the database could not be
// reached or did not answer in time, so that the same call may succeed
// later: an error that already is ErrUnavailable; the caller's deadline;
// a network error (connection refused or reset, a dial, read or write
// timeout, a name that does not resolve); a connection closed under a
// query; a failure to connect, unless the server answered it with an
// error of its own (a wrong password or an unknown database is a
// configuration error, not an outage); and the SQLSTATEs of class 08
// (connection exception), 57P01 admin_shutdown, 57P02 crash_shutdown,
// 57P03 cannot_connect_now, 57P05 idle_session_timeout, 53300
// too_many_connections, 57014 query_canceled (a statement_timeout) and
// 55P03 lock_not_available (a lock_timeout). A nil error, a cancelled
// context and every other error are not.
//
// The Store's own methods already return errors that wrap ErrUnavailable
// in these cases; IsUnavailable also classifies the errors of code that
// does not translate them.
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, pgconn.ErrConnClosed) {
		// pgx's "conn closed": a pooled connection the server (restarted,
		// or gone) had closed.
		return true
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return unavailableCode(pgErr.Code)
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return true
	}
	if pgconn.Timeout(err) {
		return true
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

// unavailableCode reports whether a SQLSTATE says the server cannot serve
// the call now.
func unavailableCode(code string) bool {
	if strings.HasPrefix(code, "08") { // connection exception
		return true
	}
	switch code {
	case "57P01", // admin_shutdown
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now
		"57P05", // idle_session_timeout
		"53300", // too_many_connections
		"57014", // query_canceled: statement_timeout
		"55P03": // lock_not_available: lock_timeout
		return true
	}
	return false
}

// translate maps an error of pgx to the sentinels of this package:
// pgx.ErrNoRows to ErrNotFound, and an outage (IsUnavailable) to an error
// that wraps both ErrUnavailable and the cause. Anything else, nil
// included, is returned as it is.
func translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return ErrNotFound
	case errors.Is(err, ErrUnavailable):
		return err
	case IsUnavailable(err):
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}
