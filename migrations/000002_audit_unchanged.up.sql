-- A change whose result equals the active spec stores no generation and is
-- audited with the outcome 'unchanged'.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_outcome_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check
    CHECK (outcome IN ('accepted', 'unchanged', 'refused'));
