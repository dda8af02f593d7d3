DROP TABLE IF EXISTS canary_runner_lease;
