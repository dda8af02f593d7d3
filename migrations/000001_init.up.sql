-- Generations: the versioned routing configuration. Append-only; the active
-- generation is the one with the highest id. Ids are assigned by the
-- publisher under an advisory lock, so they run 1, 2, 3 ... without gaps.
CREATE TABLE generations (
    id         bigint      PRIMARY KEY CHECK (id > 0),
    spec       jsonb       NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    parent_id  bigint      NULL REFERENCES generations (id),
    action     text        NOT NULL
               CHECK (action IN ('create', 'flip', 'weights', 'rollback', 'kill', 'adopt')),
    source_id  bigint      NULL REFERENCES generations (id),
    author     text        NOT NULL DEFAULT '',
    message    text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT generations_parent_before CHECK (parent_id IS NULL OR parent_id < id),
    CONSTRAINT generations_rollback_source CHECK (action <> 'rollback' OR source_id IS NOT NULL)
);

-- Generations are history: refuse every UPDATE, DELETE and TRUNCATE.
CREATE FUNCTION generations_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'generations are append-only: % refused', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER generations_no_update_delete
    BEFORE UPDATE OR DELETE ON generations
    FOR EACH ROW EXECUTE FUNCTION generations_append_only();

CREATE TRIGGER generations_no_truncate
    BEFORE TRUNCATE ON generations
    FOR EACH STATEMENT EXECUTE FUNCTION generations_append_only();

-- Audit log: every mutating API call, accepted or refused. generation_id is
-- not a foreign key: a refused call may name a generation that never existed.
CREATE TABLE audit_log (
    id            bigserial   PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL DEFAULT '',
    action        text        NOT NULL,
    outcome       text        NOT NULL CHECK (outcome IN ('accepted', 'refused')),
    status        integer     NOT NULL DEFAULT 0,
    generation_id bigint      NULL,
    request_id    text        NOT NULL DEFAULT '',
    remote_addr   text        NOT NULL DEFAULT '',
    detail        jsonb       NULL
);

CREATE INDEX audit_log_generation_id_idx ON audit_log (generation_id, id DESC)
    WHERE generation_id IS NOT NULL;

-- Canary events: every transient weight change of the canary controller.
CREATE TABLE canary_events (
    id            bigserial   PRIMARY KEY,
    generation_id bigint      NOT NULL REFERENCES generations (id),
    service       text        NOT NULL,
    from_weight   integer     NOT NULL CHECK (from_weight >= 0),
    to_weight     integer     NOT NULL CHECK (to_weight >= 0),
    action        text        NOT NULL CHECK (action IN ('promote', 'rollback', 'severe_rollback')),
    reason        text        NOT NULL DEFAULT '',
    baseline      jsonb       NULL,
    canary        jsonb       NULL,
    instance_id   text        NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX canary_events_generation_service_idx ON canary_events (generation_id, service, id DESC);
CREATE INDEX canary_events_service_idx ON canary_events (service, id DESC);

-- Gateway instances: each data-plane process with the generation it applied
-- and its last heartbeat. applied_generation 0 means none applied yet.
CREATE TABLE gateway_instances (
    id                 text        PRIMARY KEY,
    hostname           text        NOT NULL DEFAULT '',
    listen             text        NOT NULL DEFAULT '',
    applied_generation bigint      NOT NULL DEFAULT 0 CHECK (applied_generation >= 0),
    applied_at         timestamptz NULL,
    started_at         timestamptz NOT NULL DEFAULT now(),
    last_heartbeat     timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX gateway_instances_last_heartbeat_idx ON gateway_instances (last_heartbeat DESC);
