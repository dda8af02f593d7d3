package db_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a Listener or Store leaves a
// goroutine behind after its test ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
