UPDATE audit_log SET outcome = 'accepted' WHERE outcome = 'unchanged';
ALTER TABLE audit_log DROP CONSTRAINT audit_log_outcome_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check
    CHECK (outcome IN ('accepted', 'refused'));
