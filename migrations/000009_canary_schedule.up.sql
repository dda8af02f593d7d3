-- The waits of a canary schedule are events too: hold (a hold of
-- hold_seconds starts at the weight in force), hold_reset (an evaluation
-- that was not clean broke it) and gate (a step up waits for an operator's
-- promote, recorded as a promote with its actor).
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback', 'pause', 'resume', 'hold', 'hold_reset', 'gate'));
