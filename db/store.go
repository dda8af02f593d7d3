// Package db is Dwara's PostgreSQL storage: the append-only generations, the
// audit log and the gateway instances (Store), the schema migrations
// (Migrate), and the LISTEN/NOTIFY side that carries a publish to every data
// plane (Listener).
//
// A publish inserts the generation and notifies NotifyChannel in one
// transaction. Each process runs one Listener on a dedicated connection and
// fans its notifications out to its consumers (package node); the data
// plane's consumer, gateway/source.Database, asks for the newest generation
// id on every notification and every (re)connect (NewestID) and loads the
// generation when it is newer than the one applied, so a notification
// missed while disconnected is never a missed generation.
//
// Errors from PostgreSQL are translated to the sentinels of this package
// (ErrNotFound, ErrPreconditionFailed, ErrUnavailable) at the boundary;
// anything else is returned wrapped with the operation that failed.
package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dwara/dwara/api/apiv1"
)

// GatewayNotifyChannel is the PostgreSQL channel on which UpsertGateway
// announces that an instance applied a different generation. The payload is
// the JSON of the apiv1.GatewayInstance (see UpsertGateway for when its
// endpoint states are left out).
const GatewayNotifyChannel = "dwara_gateway"

// publishLockKey is the pg_advisory_xact_lock key that serialises
// publishers, so generation ids are assigned without gaps. Advisory locks
// are scoped to the current database, so one constant serves every database.
const publishLockKey int64 = 0x64776172610001 // "dwara" + 1

// SQLSTATE codes translated at the boundary.
const (
	codeForeignKeyViolation = "23503"
)

// Store is the PostgreSQL store of generations, audit entries and gateway
// instances, backed by a pgx connection pool. It is safe for concurrent use.
// Create it with Open and release it with Close; the zero value is not usable.
type Store struct {
	pool    *pgxpool.Pool
	connStr string
	// sessionConnStr, when set, is where connections that need a session
	// of their own (the canary runner's lock) connect.
	sessionConnStr atomic.Pointer[string]
}

// SetSessionConnString makes the connections that need a session of their
// own (the canary runner's advisory lock) connect to cs rather than to the
// pool's database URL: set it to a direct connection when the pool goes
// through a pooler in transaction mode. "" goes back to the pool's URL.
// Safe for concurrent use.
func (s *Store) SetSessionConnString(cs string) {
	s.sessionConnStr.Store(&cs)
}

// sessionConnString is the connection string of session connections.
func (s *Store) sessionConnString() string {
	if cs := s.sessionConnStr.Load(); cs != nil && *cs != "" {
		return *cs
	}
	return s.connStr
}

// Pool settings that bound a call when the database is away or hung; each
// applies unless the database URL sets its own (connect_timeout=,
// statement_timeout=, idle_in_transaction_session_timeout=).
const (
	// DefaultConnectTimeout bounds opening one connection, TCP and TLS
	// handshakes and authentication included, so that a server that
	// accepts connections and never answers (a hung or stopped process)
	// costs a caller at most this long, even one whose context has no
	// deadline.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultStatementTimeout is the server-side statement_timeout of the
	// pool's sessions: the server cancels a statement that runs longer, so
	// a statement whose caller gave up (or died) does not run on. It is
	// far above any caller's deadline, and it is not a lock_timeout: a
	// publish waiting for the publish lock behind other publishes is
	// ordinary contention, never refused for its wait alone.
	DefaultStatementTimeout = 30 * time.Second
	// DefaultIdleInTransactionTimeout is the server-side
	// idle_in_transaction_session_timeout: a session that holds a
	// transaction open without running anything (its process hung or
	// partitioned mid-publish) is ended, which releases the publish lock
	// it holds.
	DefaultIdleInTransactionTimeout = time.Minute
)

// Open returns a Store for the database at databaseURL (a postgres:// URL or
// a key=value connection string). The pool connects lazily: Open fails only
// on a malformed URL; use Ping to check that the database answers.
//
// Each connection is opened within DefaultConnectTimeout and its session
// runs with DefaultStatementTimeout and DefaultIdleInTransactionTimeout,
// unless the URL sets connect_timeout, statement_timeout or
// idle_in_transaction_session_timeout itself. Acquiring a connection from
// the pool is bounded by the caller's context only: callers that must
// answer in bounded time (the API) give every call a deadline. An error
// that means the database is away or did not answer in time wraps
// ErrUnavailable.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	// Set with SET on each new session rather than as startup parameters,
	// which a connection pooler in front of PostgreSQL (PgBouncer) may
	// refuse.
	var set []string
	for name, d := range map[string]time.Duration{
		"statement_timeout":                   DefaultStatementTimeout,
		"idle_in_transaction_session_timeout": DefaultIdleInTransactionTimeout,
	} {
		if _, own := cfg.ConnConfig.RuntimeParams[name]; !own {
			set = append(set, "SET "+name+" = "+strconv.FormatInt(d.Milliseconds(), 10))
		}
	}
	if len(set) > 0 {
		sql := strings.Join(set, "; ")
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, sql); err != nil {
				return fmt.Errorf("set session timeouts: %w", err)
			}
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	return &Store{pool: pool, connStr: databaseURL}, nil
}

// Close closes every connection of the pool, waiting for the ones in use to
// be released. The Store must not be used afterwards.
func (s *Store) Close() {
	s.pool.Close()
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", translate(err))
	}
	return nil
}

// ConnString returns the connection string the Store was opened with, for
// components that need a dedicated connection of their own (a Listener).
func (s *Store) ConnString() string {
	return s.connStr
}

// Publish stores a new generation and announces its id on NotifyChannel, in
// one transaction: subscribers never hear of a generation that is not
// committed, and a failed publish notifies nothing.
//
// Publishers are serialised by a transaction-scoped advisory lock, so ids
// run 1, 2, 3 ... without gaps under concurrency; the new generation's parent
// is the previous newest (nil for the first). An empty p.Action means
// ActionCreate. When p.IfMatch is non-nil and the active generation's id (0
// when there is none) differs from *p.IfMatch, Publish stores nothing and
// returns ErrPreconditionFailed. A p.SourceID that names no generation gives
// ErrNotFound. p.Spec must be a JSON object; it is stored as given (as
// jsonb), and the returned Generation carries p.Spec itself (the same
// bytes, not the database's rendering of them, which orders keys its own
// way): a caller that encoded the spec answers with the bytes it stored,
// without reading them back.
//
// A spec equal (as jsonb) to the active generation's is not stored again:
// Publish then returns the active generation with Unchanged set (its spec,
// equal as jsonb, is again p.Spec), notifies nothing, and a SourceID is
// not checked. The comparison runs under the
// publish lock, so it is never made against a generation that is no longer
// the newest.
func (s *Store) Publish(ctx context.Context, p PublishParams) (apiv1.Generation, error) {
	if err := checkParams(&p); err != nil {
		return apiv1.Generation{}, fmt.Errorf("publish generation: %w", err)
	}
	var g apiv1.Generation
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		newest, err := lockPublish(ctx, tx)
		if err != nil {
			return err
		}
		g, err = publishLocked(ctx, tx, newest, p)
		return err
	})
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("publish generation: %w", translate(err))
	}
	return g, nil
}

// Edit publishes what edit makes of the active generation, in one
// transaction under the publish lock: edit reads the generation that is
// still the newest when its result is stored, so concurrent edits
// serialise (each one edits the result of the one before) and none of them
// is lost or has to retry. What edit returns is published as by Publish:
// its IfMatch, when set, is checked against the active generation's id (0
// when there is none); a result equal to the active spec stores nothing
// and returns the active generation with Unchanged set; either way the
// returned Generation carries the Spec that edit returned. An error of edit
// aborts the transaction and is returned wrapped.
func (s *Store) Edit(ctx context.Context, edit EditFunc) (apiv1.Generation, error) {
	var g apiv1.Generation
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		newest, err := lockPublish(ctx, tx)
		if err != nil {
			return err
		}
		var active apiv1.Generation
		if newest > 0 {
			row := tx.QueryRow(ctx, `SELECT `+generationColumns+` FROM generations WHERE id = $1`, newest)
			if active, err = scanGeneration(row, true); err != nil {
				return fmt.Errorf("load generation %d: %w", newest, err)
			}
		}
		p, err := edit(active)
		if err != nil {
			return editError{err}
		}
		if err := checkParams(&p); err != nil {
			return err
		}
		g, err = publishLocked(ctx, tx, newest, p)
		return err
	})
	if e, ok := errors.AsType[editError](err); ok {
		return apiv1.Generation{}, fmt.Errorf("edit generation: %w", e.err)
	}
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("edit generation: %w", translate(err))
	}
	return g, nil
}

// editError carries an EditFunc's own error through the transaction, so
// that it is returned as it is, never translated.
type editError struct{ err error }

func (e editError) Error() string { return e.err.Error() }

// checkParams fills in p's default action and checks what Publish needs.
func checkParams(p *PublishParams) error {
	if p.Action == "" {
		p.Action = apiv1.ActionCreate
	}
	if !validAction(p.Action) {
		return fmt.Errorf("unknown action %q", p.Action)
	}
	if len(p.Spec) == 0 {
		return errors.New("empty spec")
	}
	return nil
}

// lockPublish takes the publish lock for tx's transaction and returns the
// newest generation id (0 when there is none).
func lockPublish(ctx context.Context, tx pgx.Tx) (int64, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, publishLockKey); err != nil {
		return 0, fmt.Errorf("take publish lock: %w", err)
	}
	var newest int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM generations`).Scan(&newest); err != nil {
		return 0, fmt.Errorf("load newest id: %w", err)
	}
	return newest, nil
}

// publishLocked stores p as the generation after newest, under the publish
// lock that tx holds, and notifies NotifyChannel (see Publish).
func publishLocked(ctx context.Context, tx pgx.Tx, newest int64, p PublishParams) (apiv1.Generation, error) {
	if p.IfMatch != nil && *p.IfMatch != newest {
		return apiv1.Generation{}, fmt.Errorf("if-match %d, active %d: %w", *p.IfMatch, newest, ErrPreconditionFailed)
	}
	if newest > 0 {
		// jsonb equality ignores key order and white space, so a spec
		// that only looks different is still the same spec.
		row := tx.QueryRow(ctx, `SELECT `+generationListColumns+` FROM generations WHERE id = $1 AND spec = $2::jsonb`, newest, []byte(p.Spec))
		active, err := scanGeneration(row, false)
		switch {
		case err == nil:
			active.Spec = p.Spec
			active.Unchanged = true
			return active, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return apiv1.Generation{}, fmt.Errorf("compare with generation %d: %w", newest, err)
		}
	}
	var parent *int64
	if newest > 0 {
		parent = &newest
	}
	row := tx.QueryRow(ctx, `
		INSERT INTO generations (id, spec, parent_id, action, source_id, author, message)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		RETURNING `+generationListColumns,
		newest+1, []byte(p.Spec), parent, p.Action, p.SourceID, p.Author, p.Message)
	g, err := scanGeneration(row, false)
	if err != nil {
		if isCode(err, codeForeignKeyViolation) && p.SourceID != nil {
			return apiv1.Generation{}, fmt.Errorf("source generation %d: %w", *p.SourceID, ErrNotFound)
		}
		return apiv1.Generation{}, fmt.Errorf("insert generation %d: %w", newest+1, err)
	}
	if err := recordCanaryGroups(ctx, tx, g.ID, newest, p.CanaryKeys); err != nil {
		return apiv1.Generation{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, fmt.Sprint(g.ID)); err != nil {
		return apiv1.Generation{}, fmt.Errorf("notify generation %d: %w", g.ID, err)
	}
	g.Spec = p.Spec
	return g, nil
}

// NewestID returns the id of the active generation (the newest), 0 when
// none has been published: what Current would load, without its spec.
func (s *Store) NewestID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM generations`).Scan(&id); err != nil {
		return 0, fmt.Errorf("load newest generation id: %w", translate(err))
	}
	return id, nil
}

// Current returns the active generation (the newest) with its spec, or
// ErrNotFound when none has been published.
func (s *Store) Current(ctx context.Context) (apiv1.Generation, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+generationColumns+` FROM generations ORDER BY id DESC LIMIT 1`)
	g, err := scanGeneration(row, true)
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("load current generation: %w", translate(err))
	}
	return g, nil
}

// Get returns generation id with its spec, or ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (apiv1.Generation, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+generationColumns+` FROM generations WHERE id = $1`, id)
	g, err := scanGeneration(row, true)
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("load generation %d: %w", id, translate(err))
	}
	return g, nil
}

// Head returns generation id without its spec, as List lists it, or
// ErrNotFound: what a caller that only names the generation (an event of
// its publish) needs, without reading the spec out of the row.
func (s *Store) Head(ctx context.Context, id int64) (apiv1.Generation, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+generationListColumns+` FROM generations WHERE id = $1`, id)
	g, err := scanGeneration(row, false)
	if err != nil {
		return apiv1.Generation{}, fmt.Errorf("load generation %d: %w", id, translate(err))
	}
	return g, nil
}

// List returns up to limit generations, newest first, without their specs.
// beforeID > 0 returns only generations with id < beforeID (the next page
// after a page whose last id was beforeID); 0 starts at the newest. A limit
// <= 0 returns an empty list.
func (s *Store) List(ctx context.Context, limit int, beforeID int64) ([]apiv1.Generation, error) {
	if limit <= 0 {
		return []apiv1.Generation{}, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+generationListColumns+` FROM generations
		WHERE $1::bigint = 0 OR id < $1
		ORDER BY id DESC
		LIMIT $2`, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list generations: %w", translate(err))
	}
	gens, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apiv1.Generation, error) {
		return scanGeneration(row, false)
	})
	if err != nil {
		return nil, fmt.Errorf("list generations: %w", translate(err))
	}
	return gens, nil
}

const (
	generationListColumns = `id, parent_id, action, source_id, author, message, created_at`
	generationColumns     = generationListColumns + `, spec`
)

// scanGeneration scans generationColumns (withSpec) or generationListColumns.
func scanGeneration(row pgx.Row, withSpec bool) (apiv1.Generation, error) {
	var g apiv1.Generation
	dest := []any{&g.ID, &g.ParentID, &g.Action, &g.SourceID, &g.Author, &g.Message, &g.CreatedAt}
	var spec []byte
	if withSpec {
		dest = append(dest, &spec)
	}
	if err := row.Scan(dest...); err != nil {
		return apiv1.Generation{}, err
	}
	if withSpec {
		g.Spec = json.RawMessage(spec)
	}
	return g, nil
}

// RecordAudit appends e to the audit log and returns it as stored, with ID
// and At filled in (At is the database's time unless e.At is set).
// e.Outcome must be one of the apiv1.Outcome* constants; e.Count 0 means
// 1; a nil e.Detail is stored as SQL NULL.
//
// Whatever a caller sent, its refusal must be recordable, so the entry is
// sanitised first: every text field goes through SanitizeText (NUL
// characters and invalid UTF-8 replaced, at most 256 characters), and
// e.Detail must be JSON (a value that is not an object is wrapped as
// {"value": ...}) whose strings and keys are sanitised alike, with at
// most 100 members per object or array, 8 levels and 64 KiB in all.
func (s *Store) RecordAudit(ctx context.Context, e apiv1.AuditEntry) (apiv1.AuditEntry, error) {
	var at *time.Time
	if !e.At.IsZero() {
		at = &e.At
	}
	if e.Count <= 0 {
		e.Count = 1
	}
	for _, f := range []*string{&e.Actor, &e.Action, &e.Outcome, &e.RequestID, &e.ClientRequestID, &e.RemoteAddr} {
		*f = SanitizeText(*f, maxAuditText)
	}
	detail := sanitizeDetail(e.Detail)
	err := s.pool.QueryRow(ctx, `
		INSERT INTO audit_log (at, actor, action, outcome, status, generation_id, request_id, client_request_id, remote_addr, detail, count)
		VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		RETURNING id, at, detail`,
		at, e.Actor, e.Action, e.Outcome, e.Status, e.GenerationID, e.RequestID, e.ClientRequestID, e.RemoteAddr, detail, e.Count,
	).Scan(&e.ID, &e.At, &detail)
	if err != nil {
		return apiv1.AuditEntry{}, fmt.Errorf("record audit %s %s: %w", e.Action, e.Outcome, translate(err))
	}
	e.Detail = nullableJSON(detail)
	return e, nil
}

// AddAuditCount adds n (> 0) to the count of audit entry id: n more calls
// that the entry stands for (a burst of identical refusals is one entry).
// An id that names no entry gives ErrNotFound.
func (s *Store) AddAuditCount(ctx context.Context, id int64, n int) error {
	if n <= 0 {
		return fmt.Errorf("add to the count of audit entry %d: n = %d, want > 0", id, n)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE audit_log SET count = count + $2 WHERE id = $1`, id, n)
	if err != nil {
		return fmt.Errorf("add to the count of audit entry %d: %w", id, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("add to the count of audit entry %d: %w", id, ErrNotFound)
	}
	return nil
}

// ListAudit returns up to limit audit entries, newest first. beforeID > 0
// returns only entries with id < beforeID; 0 starts at the newest. A limit
// <= 0 returns an empty list.
func (s *Store) ListAudit(ctx context.Context, limit int, beforeID int64) ([]apiv1.AuditEntry, error) {
	if limit <= 0 {
		return []apiv1.AuditEntry{}, nil
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, actor, action, outcome, status, generation_id, request_id, client_request_id, remote_addr, detail, count
		FROM audit_log
		WHERE $1::bigint = 0 OR id < $1
		ORDER BY id DESC
		LIMIT $2`, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", translate(err))
	}
	entries, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apiv1.AuditEntry, error) {
		var e apiv1.AuditEntry
		var detail []byte
		err := row.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Outcome, &e.Status,
			&e.GenerationID, &e.RequestID, &e.ClientRequestID, &e.RemoteAddr, &detail, &e.Count)
		e.Detail = nullableJSON(detail)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", translate(err))
	}
	return entries, nil
}

// UpsertGateway records instance g as it reports itself: its applied
// generation (0 = none yet), the states of its endpoints and a heartbeat. A
// zero g.LastHeartbeat means the database's now; a zero g.StartedAt keeps
// the stored start time (now for a new instance); a zero g.AppliedAt is
// stored as NULL; nil g.Endpoints is stored as an empty list. Every call
// replaces the stored endpoint states with g's.
//
// When the instance is new or its applied generation changed, UpsertGateway
// also notifies GatewayNotifyChannel with the instance's JSON, in the same
// transaction; heartbeats alone notify nothing, even when they change the
// endpoint states, so a change of endpoint state shows in ListGateways at
// the instance's next heartbeat (every 5s by default) and is never
// announced. A payload longer than PostgreSQL allows (maxNotifyPayload)
// is sent without the endpoint states.
func (s *Store) UpsertGateway(ctx context.Context, g apiv1.GatewayInstance) error {
	if g.ID == "" {
		return errors.New("upsert gateway: empty instance id")
	}
	endpoints := g.Endpoints
	if endpoints == nil {
		endpoints = []apiv1.EndpointState{}
	}
	endpointsJSON, err := json.Marshal(endpoints)
	if err != nil {
		return fmt.Errorf("upsert gateway %q: encode endpoints: %w", g.ID, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var previous *int64
		err := tx.QueryRow(ctx, `SELECT applied_generation FROM gateway_instances WHERE id = $1 FOR UPDATE`, g.ID).Scan(&previous)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("load instance: %w", err)
		}
		row := tx.QueryRow(ctx, `
			INSERT INTO gateway_instances AS gi
				(id, hostname, listen, applied_generation, applied_at, started_at, last_heartbeat, endpoints)
			VALUES ($1, $2, $3, $4, $5, coalesce($6, now()), coalesce($7, now()), $8::jsonb)
			ON CONFLICT (id) DO UPDATE SET
				hostname = EXCLUDED.hostname,
				listen = EXCLUDED.listen,
				applied_generation = EXCLUDED.applied_generation,
				applied_at = EXCLUDED.applied_at,
				started_at = coalesce($6, gi.started_at),
				last_heartbeat = EXCLUDED.last_heartbeat,
				endpoints = EXCLUDED.endpoints
			RETURNING `+gatewayColumns,
			g.ID, g.Hostname, g.Listen, g.AppliedGeneration, nullTime(g.AppliedAt),
			nullTime(g.StartedAt), nullTime(g.LastHeartbeat), endpointsJSON)
		stored, err := scanGateway(row, false)
		if err != nil {
			return fmt.Errorf("store instance: %w", err)
		}
		if previous != nil && *previous == stored.AppliedGeneration {
			return nil
		}
		payload, err := gatewayPayload(stored)
		if err != nil {
			return fmt.Errorf("encode instance: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, GatewayNotifyChannel, payload); err != nil {
			return fmt.Errorf("notify instance: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("upsert gateway %q: %w", g.ID, translate(err))
	}
	return nil
}

// maxNotifyPayload is the longest payload pg_notify accepts: it refuses
// 8000 bytes or more (with PostgreSQL's default 8 kB block size).
const maxNotifyPayload = 7999

// gatewayPayload is the notification of instance g: its JSON, without the
// endpoint states when they would make it too long to send. ListGateways
// has them all.
func gatewayPayload(g apiv1.GatewayInstance) (string, error) {
	payload, err := json.Marshal(g)
	if err == nil && len(payload) > maxNotifyPayload {
		g.Endpoints = nil
		payload, err = json.Marshal(g)
	}
	return string(payload), err
}

// ListGateways returns the recorded gateway instances whose last heartbeat
// is within apiv1.GatewayStaleAfter of the database's now, or with all
// every one, the others marked Stale; ordered by id, each with the
// endpoint states of its last report (never nil).
func (s *Store) ListGateways(ctx context.Context, all bool) ([]apiv1.GatewayInstance, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+gatewayColumns+`, last_heartbeat < now() - make_interval(secs => $1) AS stale
		FROM gateway_instances
		WHERE $2 OR last_heartbeat >= now() - make_interval(secs => $1)
		ORDER BY id`, apiv1.GatewayStaleAfter.Seconds(), all)
	if err != nil {
		return nil, fmt.Errorf("list gateways: %w", translate(err))
	}
	gws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apiv1.GatewayInstance, error) {
		return scanGateway(row, true)
	})
	if err != nil {
		return nil, fmt.Errorf("list gateways: %w", translate(err))
	}
	return gws, nil
}

// PruneGateways deletes the gateway instances whose last heartbeat is
// older than retention (a process gone for good: a restart registers a new
// instance) and returns how many it deleted.
func (s *Store) PruneGateways(ctx context.Context, retention time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM gateway_instances WHERE last_heartbeat < now() - make_interval(secs => $1)`, retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("prune gateways: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}

const gatewayColumns = `id, hostname, listen, applied_generation, applied_at, started_at, last_heartbeat, endpoints`

// scanGateway scans a row of gatewayColumns, followed by the stale
// column when stale is true.
func scanGateway(row pgx.Row, stale bool) (apiv1.GatewayInstance, error) {
	var g apiv1.GatewayInstance
	var appliedAt *time.Time
	var endpoints []byte
	dest := []any{&g.ID, &g.Hostname, &g.Listen, &g.AppliedGeneration, &appliedAt, &g.StartedAt, &g.LastHeartbeat, &endpoints}
	if stale {
		dest = append(dest, &g.Stale)
	}
	if err := row.Scan(dest...); err != nil {
		return apiv1.GatewayInstance{}, err
	}
	if appliedAt != nil {
		g.AppliedAt = *appliedAt
	}
	g.Endpoints = []apiv1.EndpointState{}
	if err := json.Unmarshal(endpoints, &g.Endpoints); err != nil {
		return apiv1.GatewayInstance{}, fmt.Errorf("decode endpoints of instance %q: %w", g.ID, err)
	}
	return g, nil
}

func validAction(a string) bool {
	switch a {
	case apiv1.ActionCreate, apiv1.ActionFlip, apiv1.ActionWeights, apiv1.ActionRollback, apiv1.ActionKill, apiv1.ActionAdopt:
		return true
	}
	return false
}

func isCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullableJSON(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}
