package source_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/source"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// countingStore is a *db.Store that counts the generations loaded with
// their spec.
type countingStore struct {
	*db.Store
	loads atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, id int64) (apiv1.Generation, error) {
	c.loads.Add(1)
	return c.Store.Get(ctx, id)
}

// TestDatabaseLoadsOnlyNewerSpecs: a load asks for the newest id first and
// loads a spec only for a generation newer than both the one it applied
// and the one the data plane serves; a notification of a generation
// already applied or served loads no spec.
func TestDatabaseLoadsOnlyNewerSpecs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := dbtest.NewStore(t)
	store := &countingStore{Store: s}
	var serving atomic.Int64
	var applied []int64
	src := &source.Database{
		Store: store,
		Apply: func(_ context.Context, _ *config.Spec, gen int64) error {
			applied = append(applied, gen)
			return nil
		},
		Serving: serving.Load,
	}
	sync := func(wantLoads int64, wantApplied int64, wantApplies ...int64) {
		t.Helper()
		if err := src.Sync(ctx); err != nil {
			t.Fatalf("sync: %v", err)
		}
		if got := store.loads.Load(); got != wantLoads {
			t.Errorf("%d specs loaded, want %d", got, wantLoads)
		}
		if got := src.Applied(); got != wantApplied {
			t.Errorf("Applied() = %d, want %d", got, wantApplied)
		}
		if !slices.Equal(applied, wantApplies) {
			t.Errorf("applied %v, want %v", applied, wantApplies)
		}
	}

	sync(0, 0) // nothing published: nothing to load
	publish(t, s, 1)
	sync(1, 1, 1)
	for range 3 { // notified again of generation 1
		sync(1, 1, 1)
	}
	publish(t, s, 2)
	serving.Store(2) // applied by the API of the process
	sync(1, 2, 1)
	sync(1, 2, 1)
	publish(t, s, 3)
	sync(2, 3, 1, 3)
	sync(2, 3, 1, 3)
}

// TestDatabaseRetriesWithoutReloading: a generation Apply refused is
// retried on the next trigger from the spec decoded before; it is loaded
// once.
func TestDatabaseRetriesWithoutReloading(t *testing.T) {
	t.Parallel()
	s, _ := dbtest.NewStore(t)
	store := &countingStore{Store: s}
	var refuse atomic.Bool
	refuse.Store(true)
	applied := make(chan int64, 10)
	logs := make(chan string, 1000)
	src := &source.Database{
		Store: store,
		Apply: func(_ context.Context, _ *config.Spec, gen int64) error {
			if refuse.Load() {
				return errors.New("not now")
			}
			applied <- gen
			return nil
		},
		Resync:    time.Hour,
		Heartbeat: time.Hour,
		Logger:    testlog.New(t, logs),
	}
	publish(t, s, 1)
	testrun.Background(t, src.Run)
	for range 2 {
		src.Notify()
		testlog.Wait(t, logs, "apply generation failed")
	}
	refuse.Store(false)
	src.Notify()
	if got := testrun.Recv(t, applied, "apply of generation 1"); got != 1 {
		t.Fatalf("applied %d, want 1", got)
	}
	if got := store.loads.Load(); got != 1 {
		t.Errorf("generation 1 loaded %d times over three tries, want once", got)
	}
}
