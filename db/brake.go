package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// LocalBrakeActor is the actor of the severe_rollback that reports a
// proxy's local brake: "local-brake:" and the proxy's instance id.
func LocalBrakeActor(instance string) string { return "local-brake:" + instance }

// RunnerLive reports whether a canary runner holds a lease that has not
// expired by the database's clock (canary_runner_lease.until > now()):
// the runner renews it every fifth of its lease while it holds the lock
// and judges.
func (s *Store) RunnerLive(ctx context.Context) (bool, error) {
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT until > now() FROM canary_runner_lease), false)`).Scan(&live)
	if err != nil {
		return false, fmt.Errorf("read the canary runner's lease: %w", err)
	}
	return live, nil
}

// RecordLocalBrake records a proxy's local brake of the canary group of
// e.Service in e.GenerationID as one severe_rollback to 0 (e's reason,
// figures, p-value, rule and instance; actor LocalBrakeActor of
// e.InstanceID), and announces it on CanaryNotifyChannel, only when
// e.GenerationID is still the newest generation and the canary weight in
// force is above 0 (the newest action's ToWeight in the canary, else
// configured); from_weight is that weight in force. It is a
// compare-and-set serialised with every other record of the service's
// events (Record, HoldCanary), so of several proxies that braked the
// same canary, or one report retried, exactly one is recorded; the others
// find the weight at 0 and record nothing. It returns the stored event
// and whether it was recorded.
func (s *Store) RecordLocalBrake(ctx context.Context, e apiv1.CanaryEvent, configured int) (apiv1.CanaryEvent, bool, error) {
	if e.Action != apiv1.CanarySevereRollback || e.ToWeight != 0 {
		return apiv1.CanaryEvent{}, false, fmt.Errorf("record a local brake: want a severe_rollback to 0, got %s to %d", e.Action, e.ToWeight)
	}
	baseline, canary, ruleFigures, err := eventFiguresJSON(e)
	if err != nil {
		return apiv1.CanaryEvent{}, false, err
	}
	var stored apiv1.CanaryEvent
	recorded := false
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockForWeightChange(ctx, tx, e.Service); err != nil {
			return err
		}
		row := tx.QueryRow(ctx, `
			WITH cur AS (
				SELECT coalesce((
					SELECT to_weight FROM canary_events e
					WHERE e.service = $2 AND `+inCanary("e", "$1", "$2")+` AND action IN `+controllerActions+`
					ORDER BY id DESC LIMIT 1), $9) AS w
			)
			INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason,
			                           baseline, canary, p_value, instance_id, actor, rule, rule_figures)
			SELECT $1, $2, cur.w, 0, 'severe_rollback', $3, $4::jsonb, $5::jsonb, $6, $7, $8, $10, $11::jsonb
			FROM cur
			WHERE cur.w > 0 AND (SELECT max(id) FROM generations) = $1
			RETURNING `+canaryEventColumns,
			e.GenerationID, e.Service, e.Reason, baseline, canary, e.PValue, e.InstanceID,
			LocalBrakeActor(e.InstanceID), configured, e.Rule, ruleFigures)
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
		return apiv1.CanaryEvent{}, false, fmt.Errorf("record the local brake of %q: %w", e.Service, err)
	}
	return stored, recorded, nil
}
