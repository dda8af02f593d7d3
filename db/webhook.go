package db

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// RecordCanaryWebhook stores the result r of a webhook call of the canary
// group of service in generation, at the canary weight in force (weight),
// as an event (action webhook) with reason, by instance. It does not
// announce it: a result changes no weight and is no event for the hooks.
func (s *Store) RecordCanaryWebhook(ctx context.Context, generation int64, service string, weight int, instance, reason string, r apiv1.CanaryWebhookResult) (apiv1.CanaryEvent, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return apiv1.CanaryEvent{}, fmt.Errorf("encode webhook result: %w", err)
	}
	row := s.pool.QueryRow(ctx, `
		INSERT INTO canary_events (generation_id, service, from_weight, to_weight, action, reason, instance_id, rule, webhook)
		VALUES ($1, $2, $3, $3, 'webhook', $4, $5, $6, $7::jsonb)
		RETURNING `+canaryEventColumns, generation, service, weight, reason, instance, "webhook."+r.Type, js)
	e, err := scanCanaryEvent(row)
	if err != nil {
		return apiv1.CanaryEvent{}, fmt.Errorf("record webhook result of %q: %w", service, err)
	}
	return e, nil
}

// CanaryEventsAfter returns up to limit canary events with ids above
// afterID, oldest first, of every action but webhook results: what the
// event hooks are sent.
func (s *Store) CanaryEventsAfter(ctx context.Context, afterID int64, limit int) ([]apiv1.CanaryEvent, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT `+canaryEventColumns+` FROM canary_events
		WHERE id > $1 AND action <> 'webhook' ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list canary events after %d: %w", afterID, err)
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (apiv1.CanaryEvent, error) { return scanCanaryEvent(r) })
	if err != nil {
		return nil, fmt.Errorf("list canary events after %d: %w", afterID, err)
	}
	return events, nil
}

// LastCanaryEventID returns the id of the newest canary event, 0 when
// none.
func (s *Store) LastCanaryEventID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM canary_events`).Scan(&id); err != nil {
		return 0, fmt.Errorf("last canary event: %w", err)
	}
	return id, nil
}
