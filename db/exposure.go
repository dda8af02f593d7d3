package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/api/apiv1"
)

// ExposureRow is one exposure to store (gateway/fleet.ExposureWriter's
// batch): the time of the assignment, and KeyHash already in hex.
type ExposureRow struct {
	At         time.Time
	Generation int64
	Service    string
	Branch     string
	Share      float64
	KeyHash    string
	Reason     string // one of the apiv1.Exposure* reasons
}

// exposureColumns are the columns InsertExposures copies, in order.
var exposureColumns = []string{"at", "generation_id", "service", "branch", "share", "key_hash", "reason", "instance_id"}

// InsertExposures stores rows as instance's exposures with one COPY, all
// or none.
func (s *Store) InsertExposures(ctx context.Context, instance string, rows []ExposureRow) error {
	if len(rows) == 0 {
		return nil
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(rows) {
			return nil, nil
		}
		r := &rows[i]
		i++
		return []any{r.At, r.Generation, r.Service, r.Branch, r.Share, r.KeyHash, r.Reason, instance}, nil
	})
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"exposures"}, exposureColumns, src); err != nil {
		return fmt.Errorf("insert exposures: %w", translate(err))
	}
	return nil
}

// ExposureFilter selects exposures; a zero field selects every value.
type ExposureFilter struct {
	Service    string
	Generation int64
	Branch     string
	Reason     string
}

// ListExposures returns up to limit exposures matching f, newest first,
// with ids below beforeID (0 means from the newest). A limit <= 0 returns
// an empty list.
func (s *Store) ListExposures(ctx context.Context, f ExposureFilter, limit int, beforeID int64) ([]apiv1.Exposure, error) {
	if limit <= 0 {
		return []apiv1.Exposure{}, nil
	}
	if beforeID <= 0 {
		beforeID = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, at, generation_id, service, branch, share, key_hash, reason, instance_id
		FROM exposures
		WHERE id < $1 AND ($2 = '' OR service = $2) AND ($3::bigint = 0 OR generation_id = $3)
			AND ($4 = '' OR branch = $4) AND ($5 = '' OR reason = $5)
		ORDER BY id DESC LIMIT $6`, beforeID, f.Service, f.Generation, f.Branch, f.Reason, limit)
	if err != nil {
		return nil, fmt.Errorf("list exposures: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (apiv1.Exposure, error) {
		var e apiv1.Exposure
		err := row.Scan(&e.ID, &e.At, &e.GenerationID, &e.Service, &e.Branch, &e.Share, &e.KeyHash, &e.Reason, &e.InstanceID)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list exposures: %w", translate(err))
	}
	return list, nil
}

// SummarizeExposures counts the stored exposures of service per generation
// and branch (generation descending, branch ascending) and per reason
// (every reason present).
func (s *Store) SummarizeExposures(ctx context.Context, service string) (apiv1.ExposureSummary, error) {
	sum := apiv1.ExposureSummary{
		Service: service,
		Items:   []apiv1.ExposureCount{},
		Reasons: map[string]int64{apiv1.ExposureSticky: 0, apiv1.ExposureRequest: 0, apiv1.ExposureForced: 0},
	}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT generation_id, branch, count(*) FROM exposures WHERE service = $1
			GROUP BY 1, 2 ORDER BY 1 DESC, 2`, service)
		if err != nil {
			return err
		}
		var c apiv1.ExposureCount
		if _, err := pgx.ForEachRow(rows, []any{&c.GenerationID, &c.Branch, &c.Count}, func() error {
			sum.Items = append(sum.Items, c)
			sum.Total += c.Count
			return nil
		}); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT reason, count(*) FROM exposures WHERE service = $1 GROUP BY 1`, service)
		if err != nil {
			return err
		}
		var reason string
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&reason, &n}, func() error {
			sum.Reasons[reason] = n
			return nil
		})
		return err
	})
	if err != nil {
		return apiv1.ExposureSummary{}, fmt.Errorf("summarize exposures: %w", translate(err))
	}
	return sum, nil
}

// PruneExposures deletes up to limit exposures older than retention (by
// the database's clock), oldest first, and returns how many it deleted.
// Call it again while it returns limit.
func (s *Store) PruneExposures(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM exposures WHERE id IN (
			SELECT id FROM exposures WHERE at < now() - make_interval(secs => $1)
			ORDER BY at LIMIT $2)`, retention.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("prune exposures: %w", translate(err))
	}
	return tag.RowsAffected(), nil
}
