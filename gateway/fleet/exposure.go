package fleet

import (
	"context"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/gateway/proxy"
)

// Defaults of an ExposureWriter.
const (
	// DefaultExposureBatch is the most exposures one COPY writes; a full
	// batch is written at once, without waiting for the interval.
	DefaultExposureBatch = 4096
	// DefaultExposureRetention is how long exposures are kept.
	DefaultExposureRetention = 7 * 24 * time.Hour
	// DefaultExposurePruneInterval is the time between two prunings.
	DefaultExposurePruneInterval = time.Hour
	// exposurePruneLimit bounds each DELETE of a pruning; a pruning runs
	// them until one deletes less (at most exposurePruneRounds).
	exposurePruneLimit  = 10_000
	exposurePruneRounds = 100
)

// ExposureWriter writes a data-plane process's exposure records
// (proxy.ExposureQueue) to PostgreSQL with COPY, about once every Interval
// or every Batch records, and prunes the stored ones older than Retention
// in the background. While the database fails it keeps one batch, retried
// at the next interval, and drops (and counts) what comes beyond it. Set
// the fields, then call Run once.
type ExposureWriter struct {
	// Store receives the exposures. Required.
	Store *db.Store
	// Instance is the process's gateway instance id. Required.
	Instance string
	// Queue is the proxy's queue (proxy.Options.Exposures). Required.
	Queue *proxy.ExposureQueue
	// Interval is the longest a record waits in a batch; 0 means
	// DefaultFlushInterval (1s).
	Interval time.Duration
	// Batch is the most records one write takes; 0 means
	// DefaultExposureBatch.
	Batch int
	// Retention is how long stored exposures are kept; 0 means
	// DefaultExposureRetention; negative keeps them for ever (no pruning).
	Retention time.Duration
	// PruneInterval is the time between two prunings, the first one
	// PruneInterval after Run starts; 0 means DefaultExposurePruneInterval.
	PruneInterval time.Duration
	// Logger logs failed writes and prunings; nil means slog.Default().
	Logger *slog.Logger
	// Flushed, when non-nil, is called with the number of records after
	// each write that stored some (tests wait on it).
	Flushed func(n int)
	// Pruned, when non-nil, is called with the number of records deleted
	// after each pruning.
	Pruned func(n int64)
}

// Run writes until ctx is done, then writes what it holds and what is
// queued once more (bounded by a second) and returns nil. The pruning runs
// on a goroutine of its own, so a long DELETE never holds up the writes.
func (w *ExposureWriter) Run(ctx context.Context) error {
	if w.Interval <= 0 {
		w.Interval = DefaultFlushInterval
	}
	if w.Batch <= 0 {
		w.Batch = DefaultExposureBatch
	}
	if w.Retention == 0 {
		w.Retention = DefaultExposureRetention
	}
	if w.PruneInterval <= 0 {
		w.PruneInterval = DefaultExposurePruneInterval
	}
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	pruned := make(chan struct{})
	if w.Retention > 0 {
		go func() {
			defer close(pruned)
			w.prune(ctx, log)
		}()
	} else {
		close(pruned)
	}
	defer func() { <-pruned }()

	batch := make([]proxy.Exposure, 0, w.Batch)
	rows := make([]db.ExposureRow, 0, w.Batch)
	tick := time.NewTicker(w.Interval)
	defer tick.Stop()
	failing := false
	in := w.Queue.C()
	write := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		err := w.write(ctx, batch, rows[:0])
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			log.Warn("exposure records not written; keeping one batch, dropping the rest until the database answers", "err", err)
			failing = true
		case err == nil && failing:
			log.Info("exposure records written again")
			failing = false
		}
		if err == nil {
			batch = batch[:0]
		}
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			for drained := false; !drained && len(batch) < w.Batch; {
				select {
				case e := <-in:
					batch = append(batch, e)
				default:
					drained = true
				}
			}
			write(fctx)
			if n := len(batch); n > 0 {
				w.Queue.Dropped(n)
			}
			return nil
		case e := <-in:
			if len(batch) == w.Batch {
				// A write failed and its batch is kept: this one is lost.
				w.Queue.Dropped(1)
				continue
			}
			batch = append(batch, e)
			if len(batch) < w.Batch || failing {
				continue // failing: the kept batch waits for the tick
			}
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, opTimeout)
		write(wctx)
		cancel()
	}
}

// write stores batch with one COPY, using rows as scratch, and counts it.
func (w *ExposureWriter) write(ctx context.Context, batch []proxy.Exposure, rows []db.ExposureRow) error {
	var counts [proxy.ExposureForced + 1]int
	for i := range batch {
		e := &batch[i]
		rows = append(rows, db.ExposureRow{
			At:         e.Time(),
			Generation: e.Generation,
			Service:    e.Service,
			Branch:     e.Branch,
			Share:      e.Share,
			KeyHash:    hex.EncodeToString(e.KeyHash[:]),
			Reason:     e.Reason.String(),
		})
		if e.Reason <= proxy.ExposureForced {
			counts[e.Reason]++
		}
	}
	if err := w.Store.InsertExposures(ctx, w.Instance, rows); err != nil {
		return err
	}
	for r, n := range counts {
		if n > 0 {
			w.Queue.Recorded(proxy.ExposureReason(r), n)
		}
	}
	if w.Flushed != nil {
		w.Flushed(len(batch))
	}
	return nil
}

// prune deletes the exposures older than Retention every PruneInterval,
// in bounded DELETEs, until ctx is done.
func (w *ExposureWriter) prune(ctx context.Context, log *slog.Logger) {
	tick := time.NewTicker(w.PruneInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var total int64
		for range exposurePruneRounds {
			pctx, cancel := context.WithTimeout(ctx, opTimeout)
			n, err := w.Store.PruneExposures(pctx, w.Retention, exposurePruneLimit)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("exposure records not pruned", "err", err)
				}
				break
			}
			total += n
			if n < exposurePruneLimit {
				break
			}
		}
		if w.Pruned != nil {
			w.Pruned(total)
		}
	}
}
