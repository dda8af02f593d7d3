DROP TABLE IF EXISTS gateway_instances;
DROP TABLE IF EXISTS canary_events;
DROP TABLE IF EXISTS audit_log;
DROP TABLE IF EXISTS generations;
DROP FUNCTION IF EXISTS generations_append_only();
