-- Each data-plane instance reports the state of every endpoint it serves:
-- a JSON array of {"upstream", "endpoint", "up", "in_flight"}, replaced on
-- every apply and heartbeat.
ALTER TABLE gateway_instances
    ADD COLUMN endpoints jsonb NOT NULL DEFAULT '[]'
        CONSTRAINT gateway_instances_endpoints_check CHECK (jsonb_typeof(endpoints) = 'array');
