package db

import (
	"fmt"
	"strings"
)

// ReplicaGrants returns the statements that give role, a login role of
// the database named database, the least a `dwara gateway --database-url`
// replica needs: read the generations and the canary records, record its
// instance, its canary windows and its exposures (and prune the last two
// past their retention), and run the canary runner (its lease, its
// events). It never creates or migrates anything. The runner's takeover
// of a frozen holder (pg_terminate_backend) works on sessions of the same
// role; to end a runner session of another role (serve's, say), grant
// that role or pg_signal_backend too.
func ReplicaGrants(role, database string) []string {
	r := quoteIdent(role)
	return []string{
		fmt.Sprintf("GRANT CONNECT ON DATABASE %s TO %s", quoteIdent(database), r),
		"GRANT USAGE ON SCHEMA public TO " + r,
		"GRANT SELECT ON generations, canary_events, canary_windows, canary_groups, gateway_instances, canary_runner_lease, exposures TO " + r,
		// Upserts: an instance's report, the runner's lease, a second's
		// window merged with what was flushed of it already.
		"GRANT INSERT, UPDATE ON gateway_instances, canary_runner_lease, canary_windows TO " + r,
		"GRANT INSERT ON canary_events, exposures TO " + r,
		"GRANT DELETE ON canary_windows, exposures TO " + r,
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO " + r,
	}
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
