-- Canary carry-over: the canary groups of each generation, each with the
-- key of what the controller judges (gateway/config.CanaryKeys: targets,
-- weights, canary_analysis, the two upstreams) and the generation its
-- canary started in (origin). A generation whose group has its parent's
-- key inherits the parent's origin; any other starts afresh (origin = its
-- own id). The events and windows of every generation of one service and
-- origin are one canary: its weight in force, hold and rollback survive
-- an unrelated publish. A generation without rows here (published before
-- this migration, or by a publisher that names no keys) starts afresh.
CREATE TABLE canary_groups (
    generation_id bigint NOT NULL REFERENCES generations (id),
    service       text   NOT NULL,
    key           text   NOT NULL,
    origin        bigint NOT NULL REFERENCES generations (id),
    PRIMARY KEY (generation_id, service),
    CHECK (origin <= generation_id)
);

CREATE INDEX canary_groups_origin_idx ON canary_groups (service, origin);
