// Package testrun runs the parts of a test that work in the background and
// waits on their signals: Background runs a function until the test ends
// and checks how it stopped, Recv waits for one value from a channel,
// Eventually for a condition no signal announces, and Main, called from
// TestMain, fails a package whose tests leave goroutines behind. Every
// wait is bounded by Timeout; only Eventually polls.
//
// It is for tests only.
package testrun

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Timeout bounds every wait for a signal in the tests. A passing test never
// waits this long; it is generous so that a loaded machine running -race
// never reaches it.
const Timeout = 30 * time.Second

// leakWait is how long Main gives goroutines that are still stopping after
// the tests ended (connections of closed servers, say) to finish.
const leakWait = 15 * time.Second

// Background runs run in a goroutine with a context that is cancelled when
// stop is called or the test ends, whichever comes first. Then it waits for
// run to return and fails the test (t.Errorf) unless run returned nil
// within Timeout. stop waits for that too; calls after the first, and the
// call at the end of the test after stop was called, do nothing. stop is
// safe for concurrent use.
func Background(t testing.TB, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v after cancel, want nil", err)
			}
		case <-time.After(Timeout):
			t.Errorf("run did not return within %v of cancel", Timeout)
		}
	})
	t.Cleanup(stop)
	return stop
}

// Recv returns the next value from ch. It fails the test (t.Fatalf) when
// none arrives within Timeout; what names the value in that failure.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Timeout):
		t.Fatalf("timed out after %v waiting for %s", Timeout, what)
		panic("unreachable")
	}
}

// Eventually calls cond until it reports true, and fails the test
// (t.Fatalf) when it has not within Timeout; what names the condition in
// that failure. It is for conditions no signal announces (a counter of
// another process, a metric, a connection's state): cond is called again
// every pollInterval, so a passing test waits only as long as the
// condition takes. cond may fail the test itself.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// pollInterval is how often Eventually looks at its condition.
const pollInterval = 10 * time.Millisecond

// Main runs the tests of m, then each release function (to let go of what
// the tests shared, such as the idle connections of a shared http.Client),
// and exits with m's code. When every test passed, it exits with 1 instead
// if goroutines other than the test runner's are still running leakWait
// (15s) after the tests ended, and writes goleak's report to stderr:
// goroutines that are still stopping get that long to finish, so a loaded
// machine does not fail the package. Call it from TestMain.
func Main(m *testing.M, release ...func()) {
	code := m.Run()
	for _, f := range release {
		f()
	}
	if code == 0 {
		if err := leaks(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// processWide are goroutines a library starts once for the whole process
// and never stops: fasthttp's clock for the Date field of its servers.
var processWide = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
}

// leaks returns goleak's report when goroutines other than the test
// runner's are still running leakWait from now, else nil.
func leaks() error {
	deadline := time.Now().Add(leakWait)
	for {
		err := goleak.Find(processWide...) // retries for a moment itself
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
