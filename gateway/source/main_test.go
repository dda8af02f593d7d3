package source_test

import (
	"testing"

	"github.com/dwara/dwara/internal/testrun"
)

// TestMain fails the package when a source, a listener or a store leaves a
// goroutine behind after the tests ended.
func TestMain(m *testing.M) {
	testrun.Main(m)
}
