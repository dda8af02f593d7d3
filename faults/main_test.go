// Package faults is Dwara's fault and abuse suite: PostgreSQL stopped,
// restarted and hung under traffic, a process killed right after it
// acknowledged a publish, a publish the database refuses, a replica that
// was down, a rolling restart of replicas under load, and a bounded soak
// with flips every 2 s. `make test-faults` runs it (DWARA_FAULTS=1) with
// the fuzz targets FuzzRouteOddPaths and FuzzDecodeBody; `make test` skips
// it.
//
// Every test starts what it needs on 127.0.0.1 and stops it, bounds every
// loop in count and time, and asserts outcomes and order, never latency:
// figures (outage seconds, requests, failures, RSS, goroutines) are logged.
// The shared PostgreSQL server is never stopped: the tests that stop or
// hang the database start a private cluster of their own (pgcluster_test.go)
// with the machine's PostgreSQL binaries.
package faults

import (
	"os"
	"testing"

	"github.com/dwara/dwara/internal/testrun"
)

// enableEnv gates the suite: it takes minutes, stops and hangs database
// clusters of its own and builds the binary.
const enableEnv = "DWARA_FAULTS"

func TestMain(m *testing.M) {
	testrun.Main(m, loadClient.CloseIdleConnections, apiClient.CloseIdleConnections)
}

// need skips t unless the fault suite is enabled.
func need(t *testing.T) {
	t.Helper()
	if os.Getenv(enableEnv) != "1" {
		t.Skipf("the fault suite runs with %s=1 (make test-faults); skipped", enableEnv)
	}
}
