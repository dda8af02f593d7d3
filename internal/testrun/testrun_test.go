package testrun_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dwara/dwara/internal/testrun"
)

// fakeTB records Cleanup functions and Errorf calls, so that a failure of
// Background can be tested without failing a test.
type fakeTB struct {
	testing.TB
	cleanups []func()
	errors   []string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func TestBackground(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error // what run returns once cancelled
		wantErrors int
	}{
		{name: "nil after cancel", err: nil, wantErrors: 0},
		{name: "error after cancel", err: errors.New("boom"), wantErrors: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeTB{}
			runs := make(chan struct{}, 2)
			stop := testrun.Background(f, func(ctx context.Context) error {
				runs <- struct{}{}
				<-ctx.Done()
				return tt.err
			})
			testrun.Recv(t, runs, "run to start")
			stop()
			stop()
			for _, c := range f.cleanups {
				c()
			}
			if len(f.cleanups) != 1 {
				t.Errorf("%d cleanups registered, want 1", len(f.cleanups))
			}
			if len(f.errors) != tt.wantErrors {
				t.Errorf("errors = %q, want %d", f.errors, tt.wantErrors)
			}
			if len(runs) != 0 {
				t.Error("run ran more than once")
			}
		})
	}
}

func TestRecv(t *testing.T) {
	t.Parallel()
	ch := make(chan int, 1)
	ch <- 7
	if got := testrun.Recv(t, ch, "seven"); got != 7 {
		t.Errorf("Recv = %d, want 7", got)
	}
}

// TestEventually returns once the condition holds, calling it again until
// then.
func TestEventually(t *testing.T) {
	t.Parallel()
	calls := 0
	testrun.Eventually(t, "the third call", func() bool {
		calls++
		return calls == 3
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}
