package db

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
)

// recordCanaryGroups stores the canary groups of generation gen (keys by
// service, see PublishParams.CanaryKeys) in canary_groups, each with the
// origin of the parent's group when the parent's key is the same, else gen
// itself: the carry-over of a canary across a publish.
func recordCanaryGroups(ctx context.Context, tx pgx.Tx, gen, parent int64, keys map[string]string) error {
	if len(keys) == 0 {
		return nil
	}
	services := slices.Sorted(maps.Keys(keys))
	vals := make([]string, len(services))
	for i, s := range services {
		vals[i] = keys[s]
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO canary_groups (generation_id, service, key, origin)
		SELECT $1, k.service, k.key, coalesce(p.origin, $1)
		FROM unnest($3::text[], $4::text[]) AS k(service, key)
		LEFT JOIN canary_groups p ON p.generation_id = $2 AND p.service = k.service AND p.key = k.key`,
		gen, parent, services, vals)
	if err != nil {
		return fmt.Errorf("record canary groups of generation %d: %w", gen, err)
	}
	return nil
}

// inCanary is the SQL condition that a row of alias a (with generation_id
// and service columns) belongs to the canary that its service runs in the
// generation of parameter gen (e.g. "$1"): a row of that generation, or of
// an earlier generation whose group has the same origin (canary_groups),
// so carried over. service, when not "", is the parameter of the one
// service asked about. The first clause lets an index on generation_id
// serve the read.
func inCanary(a, gen, service string) string {
	lin := `canary_groups c
		JOIN canary_groups l ON l.service = c.service AND l.origin = c.origin AND l.generation_id <= c.generation_id
		WHERE c.generation_id = ` + gen
	if service != "" {
		lin += ` AND c.service = ` + service
	}
	return `(` + a + `.generation_id = ANY(ARRAY(SELECT l.generation_id FROM ` + lin + `) || ` + gen + `::bigint)
		AND (` + a + `.generation_id = ` + gen + ` OR (` + a + `.service, ` + a + `.generation_id) IN (SELECT l.service, l.generation_id FROM ` + lin + `)))`
}
