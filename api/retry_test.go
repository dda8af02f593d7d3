package api

import (
	"context"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if !backoff(ctx, time.Now(), 0) {
		t.Error("a first retry within the budget was refused")
	}
	if backoff(ctx, time.Now().Add(-retryBudget), 0) {
		t.Error("a retry past the budget was allowed")
	}
	short, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-short.Done()
	if backoff(short, time.Now(), 3) {
		t.Error("a retry past the caller's deadline was allowed")
	}
	done, cancel2 := context.WithCancel(ctx)
	cancel2()
	if backoff(done, time.Now(), 40) {
		t.Error("a retry of a cancelled call was allowed")
	}
}
