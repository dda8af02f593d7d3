// Package source feeds a data plane its generations. There are three sources,
// side by side and of the same shape: each has a Run loop and calls one
// ApplyFunc with a spec that config's decoder validated and the generation it
// belongs to, in strictly increasing order.
//
//   - File serves a spec file (`dwara gateway --config`): it loads the file at
//     start and reloads it when it changes on disk or on Reload (SIGHUP).
//     Generations count 1, 2, 3 over the successful loads of the process.
//
//   - Database follows the newest generation stored in PostgreSQL (`dwara
//     serve` and `dwara gateway --database-url`). It opens no connection of
//     its own for LISTEN: the process's one db.Listener calls Notify on every
//     notification on db.NotifyChannel and on every (re)connect, and the
//     Database loads the newest generation and applies it when it is newer
//     than the last one applied.
//
//   - ControlPlane follows the API of `dwara serve` instead (`dwara gateway
//     --control-plane`): its event stream, with a full resync on every
//     (re)connect, and reports through the API; no database credentials.
//
// Either way a spec that does not decode, validate or apply is refused with
// its errors logged, and the data plane keeps serving the generation it
// applied last.
package source

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/dwara/dwara/gateway/config"
)

// ApplyFunc makes spec the serving generation of a data plane. spec comes
// from config's decoder, which validated it; generation is its id (the
// stored id for Database, the count of successful loads for File). A source
// calls it from one goroutine at a time, with generations strictly
// increasing, so it need not be safe for concurrent use unless the caller
// also calls it from elsewhere. A non-nil error refuses the generation: the
// source logs it and the data plane keeps what it served before. A source
// with a nil ApplyFunc refuses to run.
type ApplyFunc func(ctx context.Context, spec *config.Spec, generation int64) error

// Backoff of the Database between failed loads: it doubles from minBackoff
// up to maxBackoff, with jitter.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// jitter returns d randomised to [d/2, d).
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2)
}

// orDefault returns d, or def when d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
