-- Which rule of canary_analysis decided each controller event, and the
-- figures it used (thresholds, the baseline's value, the bound, the
-- p-value against min_confidence, the hold or for_seconds). A rollback
-- that must be sustained (rollback.for_seconds) waits too: breach (the
-- rollback condition starts to hold) and breach_reset (it stopped before
-- for_seconds).
ALTER TABLE canary_events
    ADD COLUMN rule text NOT NULL DEFAULT '',
    ADD COLUMN rule_figures jsonb NULL CHECK (rule_figures IS NULL OR jsonb_typeof(rule_figures) = 'object');
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback', 'pause', 'resume', 'hold', 'hold_reset', 'gate',
                          'breach', 'breach_reset'));
