package db

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// CanaryNotifyChannel is the PostgreSQL channel on which every canary event
// (a transient weight change, a pause, a resume) is announced, in the
// transaction that records it. The payload is the JSON of the
// apiv1.CanaryEvent.
const CanaryNotifyChannel = "dwara_canary"

// canaryLockKey is the session-level advisory lock held by the one canary
// runner of a database.
const canaryLockKey int64 = 0x64776172610003 // "dwara" + 3 (+ 2 is dbtest's template lock)

// canaryHoldLockKey is the first key of the transaction-level advisory
// lock (with the service's hash) that serialises holds of a service.
const canaryHoldLockKey int32 = 0x64770003

// The versions of a canary group in canary_windows.
const (
	VersionBaseline = "baseline"
	VersionCanary   = "canary"
)

// CanaryWindowRow is one instance's aggregate of one version of one canary
// group over about a second. Latency is a sparse histogram: [bucket, count]
// pairs, buckets ascending (gateway/canary.Histogram.AppendSparse).
type CanaryWindowRow struct {
	Generation       int64
	Service          string
	Version          string // VersionBaseline or VersionCanary
	Requests, Errors uint64
	Latency          [][2]uint64
}

// CanaryTotals is the fleet's aggregate of one version over a window:
// every instance's rows summed, the latency histograms merged (bucket
// ascending, each bucket once).
type CanaryTotals struct {
	Requests, Errors uint64
	Latency          [][2]uint64
}

// FlushCanaryWindows stores rows as instance's aggregates of the current
// second (by the database's clock). Two flushes within one second add up.
// Rows with no requests are skipped; two rows of one generation, service
// and version are refused (add them up first).
func (s *Store) FlushCanaryWindows(ctx context.Context, instance string, rows []CanaryWindowRow) error {
	var (
		gens                []int64
		services, versions  []string
		requests, errorsCol []int64
		latency             []string
	)
	type key struct {
		gen              int64
		service, version string
	}
	seen := make(map[key]bool, len(rows))
	for _, r := range rows {
		if r.Requests == 0 {
			continue
		}
		if k := (key{r.Generation, r.Service, r.Version}); seen[k] {
			return fmt.Errorf("flush canary windows: two rows of %s of %q in generation %d", r.Version, r.Service, r.Generation)
		} else {
			seen[k] = true
		}
		if r.Version != VersionBaseline && r.Version != VersionCanary {
			return fmt.Errorf("flush canary windows: unknown version %q", r.Version)
		}
		lat := r.Latency
		if lat == nil {
			lat = [][2]uint64{}
		}
		js, err := json.Marshal(lat)
		if err != nil {
			return fmt.Errorf("flush canary windows: %w", err)
		}
		gens = append(gens, r.Generation)
		services = append(services, r.Service)
		versions = append(versions, r.Version)
		requests = append(requests, int64(r.Requests))
		errorsCol = append(errorsCol, int64(r.Errors))
		latency = append(latency, string(js))
	}
	if len(gens) == 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO canary_windows AS w (generation_id, service, second, instance_id, version, requests, errors, latency)
		SELECT g, svc, date_trunc('second', now()), $1, v, r, e, l::jsonb
		FROM unnest($2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::text[]) AS u(g, svc, v, r, e, l)
		ON CONFLICT (generation_id, service, second, instance_id, version) DO UPDATE SET
			requests = w.requests + EXCLUDED.requests,
			errors = w.errors + EXCLUDED.errors,
			latency = (
				SELECT coalesce(jsonb_agg(jsonb_build_array(b, c) ORDER BY b), '[]'::jsonb)
				FROM (
					SELECT (p->>0)::int AS b, sum((p->>1)::bigint) AS c
					FROM jsonb_array_elements(w.latency || EXCLUDED.latency) AS p
					GROUP BY 1
				) AS merged
			)`,
		instance, gens, services, versions, requests, errorsCol, latency)
	if err != nil {
		return fmt.Errorf("flush canary windows: %w", err)
	}
	return nil
}

// CanaryWindow returns the fleet's totals of the baseline and the canary of
// service in generation over the last window (by the database's clock),
// the rows of the generations its canary was carried over from included,
// and the database's time of the reading.
func (s *Store) CanaryWindow(ctx context.Context, generation int64, service string, window time.Duration) (baseline, canary CanaryTotals, now time.Time, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		secs := window.Seconds()
		rows, err := tx.Query(ctx, `
			SELECT version, sum(requests), sum(errors), now()
			FROM canary_windows w
			WHERE w.service = $2 AND `+inCanary("w", "$1", "$2")+` AND second > now() - make_interval(secs => $3)
			GROUP BY version`, generation, service, secs)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v string
			var r, e int64
			if err := rows.Scan(&v, &r, &e, &now); err != nil {
				return err
			}
			t := totalsOf(v, &baseline, &canary)
			t.Requests, t.Errors = uint64(r), uint64(e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if now.IsZero() {
			if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
				return err
			}
			return nil // no rows
		}
		rows, err = tx.Query(ctx, `
			SELECT version, (p->>0)::bigint AS b, sum((p->>1)::bigint)
			FROM canary_windows w, jsonb_array_elements(latency) AS p
			WHERE w.service = $2 AND `+inCanary("w", "$1", "$2")+` AND second > now() - make_interval(secs => $3)
			GROUP BY version, b
			ORDER BY version, b`, generation, service, secs)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v string
			var b, c int64
			if err := rows.Scan(&v, &b, &c); err != nil {
				return err
			}
			if b < 0 || c < 0 {
				return fmt.Errorf("negative latency bucket %d or count %d", b, c)
			}
			t := totalsOf(v, &baseline, &canary)
			t.Latency = append(t.Latency, [2]uint64{uint64(b), uint64(c)})
		}
		return rows.Err()
	})
	if err != nil {
		return CanaryTotals{}, CanaryTotals{}, time.Time{}, fmt.Errorf("read canary window of %q in generation %d: %w", service, generation, err)
	}
	return baseline, canary, now, nil
}

func totalsOf(version string, baseline, canary *CanaryTotals) *CanaryTotals {
	if version == VersionCanary {
		return canary
	}
	return baseline
}

// PruneCanaryWindows deletes the window rows older than retention and
// returns how many it deleted.
func (s *Store) PruneCanaryWindows(ctx context.Context, retention time.Duration) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM canary_windows WHERE second < now() - make_interval(secs => $1)`, retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("prune canary windows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// CanaryState is what storage knows of one canary group in one generation.
// "This canary" is the group's events in the generation and in the earlier
// generations it was carried over from (canary_groups: same origin).
type CanaryState struct {
	// Transient is true when the controller changed the canary's weight
	// in this canary; Weight is then the canary weight in force.
	Transient bool
	Weight    int
	// LastAction is the time of the newest controller action on the group
	// in this canary (the database's clock); zero when none.
	LastAction time.Time
	// Paused is true when the newest pause or resume of the service, in
	// any generation, is a pause: a hold lasts until it is resumed.
	Paused bool
	// HoldSince is the time of the hold event that started the hold
	// running at the weight in force; zero when none runs (none since the
	// newest weight change, or broken by a hold_reset since, or a gate
	// waits).
	HoldSince time.Time
	// Gate is true when a gate event waits at the weight in force: no
	// weight change since it.
	Gate bool
	// BreachSince is the time of the breach event since which the
	// rollback condition holds (rollback.for_seconds); zero when none
	// (none since the newest weight change, or a breach_reset since).
	BreachSince time.Time
	// LastEvent is the newest event of the group in this canary, webhook
	// results aside; nil when none.
	LastEvent *apiv1.CanaryEvent
}

// controllerActions is the SQL list of the controller's own actions: the
// ones that change weights.
const controllerActions = `('promote', 'rollback', 'severe_rollback')`

// waitActions is the SQL list of the waits of a schedule and of a
// sustained rollback.
const waitActions = `('hold', 'hold_reset', 'gate', 'breach', 'breach_reset')`

// waitKind is the SQL expression that sorts a wait into its kind: the
// newest event of each kind, since the newest weight change, is in force.
const waitKind = `CASE WHEN action = 'gate' THEN 0 WHEN action IN ('hold', 'hold_reset') THEN 1 ELSE 2 END`

// CanaryStates returns the state of every service of generation that has
// canary events in its canary (carried over included) or a pause in force. A service missing from the map
// has no transient weight, was never acted on and is not paused.
func (s *Store) CanaryStates(ctx context.Context, generation int64) (map[string]CanaryState, error) {
	return canaryStates(ctx, s.pool, generation)
}

func canaryStates(ctx context.Context, q querier, generation int64) (map[string]CanaryState, error) {
	states := make(map[string]CanaryState)
	rows, err := q.Query(ctx, `
		SELECT DISTINCT ON (service) `+canaryEventColumns+`
		FROM canary_events e WHERE `+inCanary("e", "$1", "")+` AND action IN `+controllerActions+`
		ORDER BY service, id DESC`, generation)
	if err != nil {
		return nil, fmt.Errorf("load canary weights of generation %d: %w", generation, err)
	}
	actions, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (apiv1.CanaryEvent, error) { return scanCanaryEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("load canary weights of generation %d: %w", generation, err)
	}
	changed := make(map[string]int64, len(actions))
	for _, e := range actions {
		states[e.Service] = CanaryState{Transient: true, Weight: e.ToWeight, LastAction: e.CreatedAt}
		changed[e.Service] = e.ID
	}
	rows, err = q.Query(ctx, `
		SELECT DISTINCT ON (service, `+waitKind+`) id, service, action, created_at
		FROM canary_events e WHERE `+inCanary("e", "$1", "")+` AND action IN `+waitActions+`
		ORDER BY service, `+waitKind+`, id DESC`, generation)
	if err != nil {
		return nil, fmt.Errorf("load canary waits of generation %d: %w", generation, err)
	}
	var (
		id       int64
		service  string
		action   string
		at       time.Time
		holdFrom = map[string]time.Time{}
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &service, &action, &at}, func() error {
		if id < changed[service] {
			return nil // before the newest weight change: over
		}
		st := states[service]
		switch action {
		case apiv1.CanaryGate:
			st.Gate = true
		case apiv1.CanaryHold:
			holdFrom[service] = at
		case apiv1.CanaryBreach:
			st.BreachSince = at
		}
		states[service] = st
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load canary waits of generation %d: %w", generation, err)
	}
	for service, at := range holdFrom {
		if st := states[service]; !st.Gate {
			st.HoldSince = at
			states[service] = st
		}
	}
	rows, err = q.Query(ctx, `
		SELECT DISTINCT ON (service) service, action = 'pause'
		FROM canary_events WHERE action IN ('pause', 'resume')
		ORDER BY service, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("load canary holds: %w", err)
	}
	var paused bool
	_, err = pgx.ForEachRow(rows, []any{&service, &paused}, func() error {
		if paused {
			st := states[service]
			st.Paused = true
			states[service] = st
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load canary holds: %w", err)
	}
	rows, err = q.Query(ctx, `
		SELECT DISTINCT ON (service) `+canaryEventColumns+`
		FROM canary_events e WHERE `+inCanary("e", "$1", "")+` AND action <> 'webhook'
		ORDER BY service, id DESC`, generation)
	if err != nil {
		return nil, fmt.Errorf("load canary events of generation %d: %w", generation, err)
	}
	last, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (apiv1.CanaryEvent, error) { return scanCanaryEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("load canary events of generation %d: %w", generation, err)
	}
	for _, e := range last {
		st := states[e.Service]
		st.LastEvent = &e
		states[e.Service] = st
	}
	return states, nil
}

// ListCanaryEvents returns up to limit canary events, newest first, with
// ids below beforeID (0 means from the newest), of service ("" means every
// service) in generation (0 means every generation).
func (s *Store) ListCanaryEvents(ctx context.Context, service string, generation int64, limit int, beforeID int64) ([]apiv1.CanaryEvent, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("list canary events: limit %d must be positive", limit)
	}
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+canaryEventColumns+` FROM canary_events
		WHERE id < $1 AND ($2 = '' OR service = $2) AND ($3::bigint = 0 OR generation_id = $3)
		ORDER BY id DESC LIMIT $4`, beforeID, service, generation, limit)
	if err != nil {
		return nil, fmt.Errorf("list canary events: %w", err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (apiv1.CanaryEvent, error) { return scanCanaryEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("list canary events: %w", err)
	}
	return events, nil
}

// ErrUnchanged is returned by HoldCanary when the group already is in the
// asked state; nothing was recorded.
var ErrUnchanged = errors.New("unchanged")

// HoldCanary records an operator's pause (pause true) or resume of the
// canary group of service, in generation, at the canary weight in force
// (weight), and announces it on CanaryNotifyChannel. A pause already in
// force (or a resume of a group that is not paused) records nothing and
// returns ErrUnchanged; a generation that is not the newest gives
// ErrPreconditionFailed.
func (s *Store) HoldCanary(ctx context.Context, generation int64, service string, pause bool, weight int, actor, reason string) (apiv1.CanaryEvent, error) {
	action := apiv1.CanaryResume
	if pause {
		action = apiv1.CanaryPause
	}
	var e apiv1.CanaryEvent
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Serialise holds of a service with each other.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, canaryHoldLockKey, service); err != nil {
			return err
		}
		var newest int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM generations`).Scan(&newest); err != nil {
			return err
		}
		if newest != generation {
			return ErrPreconditionFailed
		}
		var paused bool
		err := tx.QueryRow(ctx, `
			SELECT action = 'pause' FROM canary_events
			WHERE service = $1 AND action IN ('pause', 'resume') ORDER BY id DESC LIMIT 1`, service).Scan(&paused)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if paused == pause {
			return ErrUnchanged
		}
		row := tx.QueryRow(ctx, `
			INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason, actor)
			VALUES ($1, $2, $3, $3, $4, $5, $6)
			RETURNING `+canaryEventColumns, generation, service, weight, action, reason, actor)
		if e, err = scanCanaryEvent(row); err != nil {
			return err
		}
		return notifyCanary(ctx, tx, e)
	})
	if errors.Is(err, ErrUnchanged) || errors.Is(err, ErrPreconditionFailed) {
		return apiv1.CanaryEvent{}, err
	}
	if err != nil {
		return apiv1.CanaryEvent{}, fmt.Errorf("%s canary %q: %w", action, service, err)
	}
	return e, nil
}

// CanaryLock is the canary runner's session-level advisory lock, held on a
// connection of its own: the lock lives exactly as long as that session,
// so a runner whose connection is lost has lost the lock, and its
// recording, which runs on the same connection, fails. It is not safe for
// concurrent use.
type CanaryLock struct {
	conn  *pgx.Conn
	lease time.Duration
	// TookOver is the backend pid of the runner session whose expired
	// lease this lock ended to be taken; 0 when the lock was free.
	TookOver int32
}

// CanaryRunnerApplicationName is the application_name of the canary
// runner's lock connection, so an operator finds the holder in
// pg_stat_activity.
const CanaryRunnerApplicationName = "dwara-canary-runner"

// DefaultCanaryLease is how long the runner's lease lasts unless renewed
// (TryCanaryLease).
const DefaultCanaryLease = 5 * time.Second

// TryCanaryLock is TryCanaryLease with no instance name and the default
// lease.
func (s *Store) TryCanaryLock(ctx context.Context) (*CanaryLock, error) {
	return s.TryCanaryLease(ctx, "", DefaultCanaryLease)
}

// TryCanaryLease opens a connection and tries to take the runner lock on
// it, with a lease of lease recorded for instance (canary_runner_lease);
// the holder must renew it (CanaryLock.Renew) well within lease. It
// returns nil and no error when another session holds the lock. When that
// session's lease has expired (its holder stopped renewing: frozen, or
// wedged, with its session still open), it terminates that session
// (pg_terminate_backend), which releases the lock once the server has
// ended it, and tries once more; Taken reports a takeover.
func (s *Store) TryCanaryLease(ctx context.Context, instance string, lease time.Duration) (*CanaryLock, error) {
	cfg, err := pgx.ParseConfig(s.sessionConnString())
	if err != nil {
		return nil, fmt.Errorf("canary lock: %w", err)
	}
	cfg.RuntimeParams["application_name"] = CanaryRunnerApplicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("canary lock: connect: %w", err)
	}
	l := &CanaryLock{conn: conn, lease: lease}
	ok, err := l.try(ctx)
	if err == nil && !ok {
		var stale int32
		stale, err = l.expiredHolder(ctx)
		if err == nil && stale != 0 {
			var ended bool
			if err = conn.QueryRow(ctx, `SELECT pg_terminate_backend($1, 5000)`, stale).Scan(&ended); err == nil && ended {
				l.TookOver = stale
				ok, err = l.try(ctx)
			}
		}
	}
	if err == nil && ok {
		_, err = conn.Exec(ctx, `
			INSERT INTO canary_runner_lease (id, instance, backend_pid, until)
			VALUES (true, $1, pg_backend_pid(), now() + make_interval(secs => $2))
			ON CONFLICT (id) DO UPDATE SET instance = EXCLUDED.instance,
				backend_pid = EXCLUDED.backend_pid, until = EXCLUDED.until`, instance, lease.Seconds())
	}
	if err != nil || !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return nil, fmt.Errorf("canary lock: %w", err)
		}
		return nil, nil
	}
	return l, nil
}

// try tries to take the advisory lock on l's session.
func (l *CanaryLock) try(ctx context.Context) (bool, error) {
	var ok bool
	err := l.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, canaryLockKey).Scan(&ok)
	return ok, err
}

// expiredHolder returns the backend pid of the lock's holder when its
// lease has expired and that backend is a runner's session that still
// exists, else 0.
func (l *CanaryLock) expiredHolder(ctx context.Context) (int32, error) {
	var pid int32
	err := l.conn.QueryRow(ctx, `
		SELECT a.pid FROM canary_runner_lease r
		JOIN pg_stat_activity a ON a.pid = r.backend_pid AND a.application_name = $1
		WHERE r.until < now()`, CanaryRunnerApplicationName).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return pid, err
}

// Renew extends the lease from now; an error means the lease, and so the
// lock, may be lost (another runner took over, or the session is gone):
// the holder must stop acting.
func (l *CanaryLock) Renew(ctx context.Context) error {
	tag, err := l.conn.Exec(ctx, `UPDATE canary_runner_lease SET until = now() + make_interval(secs => $1) WHERE backend_pid = pg_backend_pid()`, l.lease.Seconds())
	if err != nil {
		return fmt.Errorf("canary lock: renew the lease: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return errors.New("canary lock: the lease is another runner's")
	}
	return nil
}

// Close releases the lock, at once when the session still answers, and
// closes the session (which releases it too, once the server notices).
func (l *CanaryLock) Close(ctx context.Context) {
	_, _ = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, canaryLockKey)
	_ = l.conn.Close(ctx)
}

// Newest returns the id of the newest generation (0 when none) and the
// database's time, on the lock's session: an error means the lock may be
// lost.
func (l *CanaryLock) Newest(ctx context.Context) (int64, time.Time, error) {
	var id int64
	var now time.Time
	if err := l.conn.QueryRow(ctx, `SELECT coalesce(max(id), 0), now() FROM generations`).Scan(&id, &now); err != nil {
		return 0, time.Time{}, fmt.Errorf("canary lock: newest generation: %w", err)
	}
	return id, now, nil
}

// States is Store.CanaryStates on the lock's session.
func (l *CanaryLock) States(ctx context.Context, generation int64) (map[string]CanaryState, error) {
	return canaryStates(ctx, l.conn, generation)
}

// Record stores a controller action and announces it on
// CanaryNotifyChannel, in one transaction on the lock's session, only when
// e.GenerationID is still the newest generation and e.FromWeight is the
// canary weight in force (the newest action's ToWeight in that
// generation's canary, carried over included, else configured): a compare-and-set, so an action judged on a state that
// changed is never recorded. It returns the stored event and whether it
// was recorded.
func (l *CanaryLock) Record(ctx context.Context, e apiv1.CanaryEvent, configured int) (apiv1.CanaryEvent, bool, error) {
	switch e.Action {
	case apiv1.CanaryPromote, apiv1.CanaryRollback, apiv1.CanarySevereRollback:
	case apiv1.CanaryHold, apiv1.CanaryHoldReset, apiv1.CanaryGate, apiv1.CanaryBreach, apiv1.CanaryBreachReset:
		if e.FromWeight != e.ToWeight {
			return apiv1.CanaryEvent{}, false, fmt.Errorf("record canary %s: a wait changes no weight (%d -> %d)", e.Action, e.FromWeight, e.ToWeight)
		}
	default:
		return apiv1.CanaryEvent{}, false, fmt.Errorf("record canary event: %q is not a controller action", e.Action)
	}
	baseline, canary, ruleFigures, err := eventFiguresJSON(e)
	if err != nil {
		return apiv1.CanaryEvent{}, false, err
	}
	var stored apiv1.CanaryEvent
	recorded := false
	err = pgx.BeginFunc(ctx, l.conn, func(tx pgx.Tx) error {
		if err := lockForWeightChange(ctx, tx, e.Service); err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `
			WITH cur AS (
				SELECT coalesce((
					SELECT to_weight FROM canary_events e
					WHERE e.service = $2 AND `+inCanary("e", "$1", "$2")+` AND action IN `+controllerActions+`
					ORDER BY id DESC LIMIT 1), $11) AS w
			)
			INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason,
			                           baseline, canary, p_value, instance_id, rule, rule_figures)
			SELECT $1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9, $10, $12, $13::jsonb
			FROM cur
			WHERE cur.w = $3 AND (SELECT max(id) FROM generations) = $1
			RETURNING `+canaryEventColumns,
			e.GenerationID, e.Service, e.FromWeight, e.ToWeight, e.Action, e.Reason,
			baseline, canary, e.PValue, e.InstanceID, configured, e.Rule, ruleFigures)
		var err error
		stored, err = scanCanaryEvent(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		recorded = true
		return notifyCanary(ctx, tx, stored)
	})
	if err != nil {
		return apiv1.CanaryEvent{}, false, fmt.Errorf("record canary %s of %q: %w", e.Action, e.Service, err)
	}
	return stored, recorded, nil
}

// lockForWeightChange takes the locks a compare-and-set of service's weight
// in force holds until tx ends: the publish lock shared, so a publish in
// flight commits before the change is judged against the newest
// generation (a change is never recorded on a generation a new one already
// replaced and carried over without it); and the service's hold lock, so
// the runner's record (CanaryLock.Record) and a proxy's report of a local
// brake (RecordLocalBrake) each see the other.
func lockForWeightChange(ctx context.Context, tx pgx.Tx, service string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, publishLockKey); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, canaryHoldLockKey, service)
	return err
}

// eventFiguresJSON encodes e's baseline, canary and rule figures as they
// are stored.
func eventFiguresJSON(e apiv1.CanaryEvent) (baseline, canary, ruleFigures []byte, err error) {
	if baseline, err = figuresJSON(e.Baseline); err != nil {
		return nil, nil, nil, err
	}
	if canary, err = figuresJSON(e.Canary); err != nil {
		return nil, nil, nil, err
	}
	if ruleFigures, err = ruleFiguresJSON(e.RuleFigures); err != nil {
		return nil, nil, nil, err
	}
	return baseline, canary, ruleFigures, nil
}

// ruleFiguresJSON encodes an event's rule figures; nil stays nil. JSON
// has no NaN or infinity: such a figure is left out rather than let it
// refuse the event.
func ruleFiguresJSON(figures map[string]float64) ([]byte, error) {
	if figures == nil {
		return nil, nil
	}
	finite := make(map[string]float64, len(figures))
	for k, v := range figures {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			finite[k] = v
		}
	}
	b, err := json.Marshal(finite)
	if err != nil {
		return nil, fmt.Errorf("encode rule figures: %w", err)
	}
	return b, nil
}

func figuresJSON(f *apiv1.CanaryFigures) ([]byte, error) {
	if f == nil {
		return nil, nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode canary figures: %w", err)
	}
	return b, nil
}

func notifyCanary(ctx context.Context, tx pgx.Tx, e apiv1.CanaryEvent) error {
	payload, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode canary event: %w", err)
	}
	if len(payload) > maxNotifyPayload {
		e.Reason = strings.ToValidUTF8(e.Reason[:min(len(e.Reason), 200)], "")
		if payload, err = json.Marshal(e); err != nil {
			return fmt.Errorf("encode canary event: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, CanaryNotifyChannel, string(payload)); err != nil {
		return fmt.Errorf("notify canary event: %w", err)
	}
	return nil
}

// querier is what the canary reads need of a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const canaryEventColumns = `id, generation_id, service, from_weight, to_weight, action, reason, baseline, canary, p_value, instance_id, actor, rule, rule_figures, webhook, created_at`

func scanCanaryEvent(row pgx.Row) (apiv1.CanaryEvent, error) {
	var e apiv1.CanaryEvent
	var baseline, canary, ruleFigures, webhook []byte
	if err := row.Scan(&e.ID, &e.GenerationID, &e.Service, &e.FromWeight, &e.ToWeight, &e.Action, &e.Reason,
		&baseline, &canary, &e.PValue, &e.InstanceID, &e.Actor, &e.Rule, &ruleFigures, &webhook, &e.CreatedAt); err != nil {
		return apiv1.CanaryEvent{}, err
	}
	if webhook != nil {
		e.Webhook = new(apiv1.CanaryWebhookResult)
		if err := json.Unmarshal(webhook, e.Webhook); err != nil {
			return apiv1.CanaryEvent{}, fmt.Errorf("decode webhook result of canary event %d: %w", e.ID, err)
		}
	}
	if ruleFigures != nil {
		if err := json.Unmarshal(ruleFigures, &e.RuleFigures); err != nil {
			return apiv1.CanaryEvent{}, fmt.Errorf("decode rule figures of canary event %d: %w", e.ID, err)
		}
	}
	for _, f := range []struct {
		raw []byte
		dst **apiv1.CanaryFigures
	}{{baseline, &e.Baseline}, {canary, &e.Canary}} {
		if f.raw == nil {
			continue
		}
		*f.dst = new(apiv1.CanaryFigures)
		if err := json.Unmarshal(f.raw, *f.dst); err != nil {
			return apiv1.CanaryEvent{}, fmt.Errorf("decode figures of canary event %d: %w", e.ID, err)
		}
	}
	return e, nil
}

// ParseCanaryEvent decodes the payload of a CanaryNotifyChannel
// notification.
func ParseCanaryEvent(payload string) (apiv1.CanaryEvent, error) {
	var e apiv1.CanaryEvent
	if err := json.Unmarshal([]byte(payload), &e); err != nil {
		return apiv1.CanaryEvent{}, fmt.Errorf("decode canary notification: %w", err)
	}
	if e.GenerationID <= 0 || e.Service == "" {
		return apiv1.CanaryEvent{}, fmt.Errorf("decode canary notification: no generation or service in %s", strconv.Quote(payload[:min(len(payload), 200)]))
	}
	return e, nil
}
