DELETE FROM canary_events WHERE action IN ('breach', 'breach_reset');
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback', 'pause', 'resume', 'hold', 'hold_reset', 'gate')),
    DROP COLUMN rule,
    DROP COLUMN rule_figures;
