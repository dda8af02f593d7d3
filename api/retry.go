package api

import (
	"context"
	"math/rand/v2"
	"time"
)

// A call that reads the active generation, works outside the publish lock
// and then publishes (or records) conditionally on what it read loses the
// race when another publish gets in between; it then starts over from a
// fresh read, after a jittered, exponentially growing pause, so that
// concurrent callers spread out instead of colliding again, for at most
// retryBudget.
const (
	// retryFirst is the longest pause before the first retry; each later
	// one may be twice as long, up to retryMax.
	retryFirst = 5 * time.Millisecond
	retryMax   = 250 * time.Millisecond
	// retryBudget bounds the pauses and attempts of one call, from its
	// first attempt.
	retryBudget = 2 * time.Second
)

// backoff pauses before retry number attempt (0 for the first retry) of
// a call that started at start: a random time up to retryFirst<<attempt
// (at most retryMax). It returns false, at once, when ctx is done or that
// pause would end past start+retryBudget or after ctx's deadline, and
// false when ctx ends during the pause: the caller gives up.
func backoff(ctx context.Context, start time.Time, attempt int) bool {
	if ctx.Err() != nil {
		return false
	}
	ceiling := retryMax
	if attempt < 16 {
		ceiling = min(retryFirst<<attempt, retryMax)
	}
	pause := time.Duration(rand.Int64N(int64(ceiling))) + 1
	end := time.Now().Add(pause)
	if end.After(start.Add(retryBudget)) {
		return false
	}
	if deadline, ok := ctx.Deadline(); ok && end.After(deadline) {
		return false
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
