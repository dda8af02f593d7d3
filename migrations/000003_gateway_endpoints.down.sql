ALTER TABLE gateway_instances DROP COLUMN endpoints;
