package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testdocs"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// replicaRole creates a login role on the server of the database at
// dbURL with grants (none when nil), dropped when the test ends, and
// returns the URL that connects to that database as it.
func replicaRole(t *testing.T, dbURL string, grants func(role, database string) []string) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "dwara_replica_" + hex.EncodeToString(b[:])
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	database := strings.TrimPrefix(u.Path, "/")
	dbtest.Exec(t, dbURL, `CREATE ROLE "`+role+`" LOGIN`)
	t.Cleanup(func() {
		dbtest.Exec(t, dbURL, `DROP OWNED BY "`+role+`"`)
		dbtest.Exec(t, dbURL, `DROP ROLE "`+role+`"`)
	})
	if grants != nil {
		for _, g := range grants(role, database) {
			dbtest.Exec(t, dbURL, g)
		}
	}
	u.User = url.User(role)
	return u.String()
}

// A database replica works with only the privileges of db.ReplicaGrants:
// it applies what is published, records its instance, flushes its canary
// windows, writes its exposures and runs the canary runner (the only
// process here, it takes the lock and its lease), with no "permission
// denied" in its log. Without the grants it logs one: the check can fail.
func TestReplicaLeastPrivileges(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.New(t)
	admin := openTestStore(t, dbURL)
	a, b := pools(t)

	var logs testlog.Buffer
	gc := GatewayConfig{DatabaseURL: replicaRole(t, dbURL, db.ReplicaGrants)}
	gc.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	gc.CanaryInterval, gc.CanaryLockRetry = canaryInterval, canaryInterval
	leading := make(chan bool, 4)
	gc.CanaryLeading = func(on bool) { leading <- on }
	replica := startGateway(t, gc)
	g := publishTo(t, admin, canarySpec(a, b, analysis(10, 20, 0)))
	replica.waitApplied(t, g.ID)
	if !testrun.Recv(t, leading, "the replica's runner leading") {
		t.Fatal("the replica's runner did not take the lock")
	}
	next := ids(7)
	for range 60 {
		send(t, replica.Proxy, next())
	}
	defer func() {
		if t.Failed() {
			t.Logf("replica log:\n%s", logs.String())
		}
	}()
	testrun.Eventually(t, "the replica's instance and windows recorded", func() bool {
		gws, err := admin.ListGateways(context.Background(), false)
		if err != nil || len(gws) != 1 || gws[0].AppliedGeneration != g.ID {
			return false
		}
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM canary_windows`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	time.Sleep(4 * canaryInterval) // a few more judgements and flushes
	if strings.Contains(logs.String(), "permission denied") {
		t.Errorf("the replica with db.ReplicaGrants was refused something:\n%s", logs.String())
	}

	// The control: a role with no grants is refused, and says so.
	var bare testlog.Buffer
	bc := GatewayConfig{DatabaseURL: replicaRole(t, dbURL, nil)}
	bc.Logger = slog.New(slog.NewTextHandler(&bare, &slog.HandlerOptions{Level: slog.LevelDebug}))
	startGateway(t, bc)
	testrun.Eventually(t, "a replica without grants refused", func() bool {
		return strings.Contains(bare.String(), "permission denied")
	})
}

// The README's grants for a replica's role are db.ReplicaGrants.
func TestReadmeReplicaGrants(t *testing.T) {
	t.Parallel()
	readme := testdocs.Text(t, "..")
	for _, g := range db.ReplicaGrants("dwara_replica", "dwara") {
		if line := strings.ReplaceAll(g, `"`, "") + ";"; !strings.Contains(readme, line) {
			t.Errorf("the README does not have %q", line)
		}
	}
}
