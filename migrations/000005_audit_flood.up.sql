-- A burst of identical refusals (same remote address, action, status and
-- detail within a short window) is one audit row that counts the calls it
-- stands for. The request id a client sent is kept apart from the server's
-- own, and only for authenticated calls ('' otherwise), so that no caller
-- can choose the request_id of an audit row.
ALTER TABLE audit_log
    ADD COLUMN count integer NOT NULL DEFAULT 1 CONSTRAINT audit_log_count_check CHECK (count >= 1),
    ADD COLUMN client_request_id text NOT NULL DEFAULT '';
