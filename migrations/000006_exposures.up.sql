-- Exposure records: one row per new assignment of a key to a branch (a
-- sticky handle minted, a sampled request-keyed pick, a forced pick), with
-- the branch's share at that moment. key_hash is a truncated hash of the
-- key, never the key. Written in batches (COPY) by every data-plane
-- process; pruned after a retention (by at).
CREATE TABLE exposures (
    id            bigserial        PRIMARY KEY,
    at            timestamptz      NOT NULL,
    generation_id bigint           NOT NULL,
    service       text             NOT NULL,
    branch        text             NOT NULL,
    share         double precision NOT NULL CHECK (share >= 0 AND share <= 1),
    key_hash      text             NOT NULL,
    reason        text             NOT NULL CHECK (reason IN ('sticky', 'request', 'forced')),
    instance_id   text             NOT NULL
);

CREATE INDEX exposures_service_idx ON exposures (service, generation_id, id DESC);
CREATE INDEX exposures_at_idx ON exposures (at);
