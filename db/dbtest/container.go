package dbtest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerImage is the PostgreSQL image started when no server answers.
const containerImage = "postgres:15-bookworm"

var (
	containerOnce sync.Once
	containerBase string
	containerErr  error
)

// answers reports whether something accepts TCP connections at the host
// and port of url's authority, within a second.
func answers(hostport string) bool {
	c, err := net.DialTimeout("tcp", hostport, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// containerURL starts, once per test binary, a PostgreSQL container with
// testcontainers-go and returns the URL of its postgres database. It is
// the path taken only when EnvURL is unset, nothing answers at DefaultURL
// and a Docker engine answers; testcontainers' reaper removes the
// container after the test binary exits. Without a Docker engine it
// returns an error at once.
func containerURL(ctx context.Context) (string, error) {
	containerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(ctx, setupTimeout)
		defer cancel()
		defer func() {
			// testcontainers panics on some broken Docker setups; a test run
			// without Docker must get an error, not a crash.
			if r := recover(); r != nil {
				containerErr = fmt.Errorf("no Docker engine: %v", r)
			}
		}()
		c, err := postgres.Run(ctx, containerImage,
			postgres.WithDatabase("postgres"), postgres.WithUsername("postgres"), postgres.WithPassword("postgres"),
			postgres.BasicWaitStrategies())
		if err != nil {
			containerErr = fmt.Errorf("start a PostgreSQL container: %w", err)
			return
		}
		containerBase, containerErr = c.ConnectionString(ctx, "sslmode=disable")
	})
	return containerBase, containerErr
}
