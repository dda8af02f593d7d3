ALTER TABLE audit_log
    DROP COLUMN client_request_id,
    DROP COLUMN count;
