DROP TABLE canary_windows;
DROP INDEX canary_events_hold_idx;
DELETE FROM canary_events WHERE action IN ('pause', 'resume');
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback')),
    DROP COLUMN p_value,
    DROP COLUMN actor;
