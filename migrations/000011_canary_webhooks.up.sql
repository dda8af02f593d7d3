-- Webhook results are recorded beside the canary events, as events of
-- their own (action webhook, from_weight = to_weight, the weight in
-- force): the hook's name, type and URL, the event it was called for, the
-- HTTP status, whether it counted as a success, the error, the attempts
-- and how long the call took.
ALTER TABLE canary_events
    ADD COLUMN webhook jsonb NULL CHECK (webhook IS NULL OR jsonb_typeof(webhook) = 'object');
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback', 'pause', 'resume', 'hold', 'hold_reset', 'gate',
                          'breach', 'breach_reset', 'webhook'));
