package node

import (
	"testing"
	"time"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testnet"
)

// A generation published while serve's LISTEN connection is away (its
// notification reaches no one) still reaches a --control-plane gateway as
// soon as the connection is back: the API ends its event streams on the
// reconnect, so the gateway reconnects and resyncs, long before its own
// resync (an hour here) would have.
func TestControlPlaneCatchesUpAfterRelisten(t *testing.T) {
	t.Parallel()
	store, direct := dbtest.NewStore(t)
	a, b := pools(t)
	relayed, relay := relayedURL(t, direct)
	const token = "cp-token"
	admin := testnet.FreeAddr(t)
	sc := ServeConfig{DatabaseURL: direct, AdminToken: token}
	sc.ListenDatabaseURL = relayed // only the LISTEN connection goes through the relay
	startServeOn(t, sc, admin)
	gc := GatewayConfig{ControlPlane: "http://" + admin, ControlPlaneToken: token}
	gc.Resync = time.Hour
	gw := startGateway(t, gc)

	g1 := publishTo(t, store, specJSON(a, b, 100, 0))
	gw.waitApplied(t, g1.ID)
	relay.Cut()
	// Published while nobody listens: no event is sent for it.
	g2 := publishTo(t, store, specJSON(a, b, 0, 100))
	relay.Restore()
	gw.waitApplied(t, g2.ID)
	if got := pool(t, gw.Proxy); got != "pool-b" {
		t.Errorf("generation %d through the gateway: served by %q, want pool-b", g2.ID, got)
	}
}
