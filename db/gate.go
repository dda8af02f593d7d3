package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// ErrNoGate is returned by PassCanaryGate when no gate waits at the weight
// in force; nothing was recorded.
var ErrNoGate = errors.New("no gate waiting")

// PassCanaryGate records an operator's promote of the canary group of
// service in generation through the gate that waits at weight from (the
// canary weight in force; configured is the generation's, for a canary
// the controller never moved) to weight to, by actor with reason, and
// announces it on CanaryNotifyChannel. It gives ErrPreconditionFailed when
// generation is not the newest, and ErrNoGate when no gate event waits
// there (none since the newest weight change, or the weight in force is
// not from).
func (s *Store) PassCanaryGate(ctx context.Context, generation int64, service string, from, to, configured int, actor, reason string) (apiv1.CanaryEvent, error) {
	var e apiv1.CanaryEvent
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, publishLockKey); err != nil {
			return err
		}
		var newest int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM generations`).Scan(&newest); err != nil {
			return err
		}
		if newest != generation {
			return ErrPreconditionFailed
		}
		row := tx.QueryRow(ctx, `
			WITH w AS (
				SELECT id, to_weight FROM canary_events e
				WHERE e.service = $2 AND `+inCanary("e", "$1", "$2")+` AND action IN `+controllerActions+`
				ORDER BY id DESC LIMIT 1
			), g AS (
				SELECT id FROM canary_events e
				WHERE e.service = $2 AND `+inCanary("e", "$1", "$2")+` AND action = 'gate'
				ORDER BY id DESC LIMIT 1
			)
			INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason, actor)
			SELECT $1, $2, $3, $4, 'promote', $5, $6
			WHERE (SELECT id FROM g) > coalesce((SELECT id FROM w), 0)
			  AND coalesce((SELECT to_weight FROM w), $7) = $3
			RETURNING `+canaryEventColumns, generation, service, from, to, reason, actor, configured)
		var err error
		if e, err = scanCanaryEvent(row); errors.Is(err, pgx.ErrNoRows) {
			return ErrNoGate
		} else if err != nil {
			return err
		}
		return notifyCanary(ctx, tx, e)
	})
	if errors.Is(err, ErrNoGate) || errors.Is(err, ErrPreconditionFailed) {
		return apiv1.CanaryEvent{}, err
	}
	if err != nil {
		return apiv1.CanaryEvent{}, fmt.Errorf("pass the canary gate of %q: %w", service, err)
	}
	return e, nil
}
