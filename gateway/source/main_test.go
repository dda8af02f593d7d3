package source_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when a source, a listener or a store leaves a
// goroutine behind after the tests ended. Goroutines that are still
// stopping (connections of closed servers) get up to leakWait to finish, so
// a loaded machine does not fail it.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

const leakWait = 15 * time.Second

// findLeaks returns goleak's report when goroutines other than the test
// runner's are still running leakWait after the tests ended.
func findLeaks() error {
	deadline := time.Now().Add(leakWait)
	for {
		err := goleak.Find() // retries for a moment itself
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
