-- Canary analysis. canary_events also records an operator's pause and
-- resume of a group (from_weight = to_weight), who did it, and the p-value
-- of the judgement behind each controller action.
ALTER TABLE canary_events DROP CONSTRAINT canary_events_action_check;
ALTER TABLE canary_events
    ADD CONSTRAINT canary_events_action_check
        CHECK (action IN ('promote', 'rollback', 'severe_rollback', 'pause', 'resume')),
    ADD COLUMN p_value double precision NULL CHECK (p_value IS NULL OR (p_value >= 0 AND p_value <= 1)),
    ADD COLUMN actor text NOT NULL DEFAULT '';

CREATE INDEX canary_events_hold_idx ON canary_events (service, id DESC)
    WHERE action IN ('pause', 'resume');

-- Canary windows: each data-plane instance's per-second aggregates of each
-- canary group's two versions. The runner judges the union of every
-- instance's rows over a group's window, so thresholds and min_requests
-- mean the whole fleet's traffic. latency is a sparse histogram: a JSON
-- array of [bucket, count] pairs, buckets ascending (gateway/canary's
-- log-linear buckets). Rows are pruned after a retention.
CREATE TABLE canary_windows (
    generation_id bigint      NOT NULL,
    service       text        NOT NULL,
    second        timestamptz NOT NULL,
    instance_id   text        NOT NULL,
    version       text        NOT NULL CHECK (version IN ('baseline', 'canary')),
    requests      bigint      NOT NULL CHECK (requests >= 0),
    errors        bigint      NOT NULL CHECK (errors >= 0 AND errors <= requests),
    latency       jsonb       NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(latency) = 'array'),
    PRIMARY KEY (generation_id, service, second, instance_id, version)
);

CREATE INDEX canary_windows_second_idx ON canary_windows (second);
