package node

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testnet"
)

// startServeOn starts dwara serve with its API on admin, waiting (bounded)
// for the address to be free again first.
func startServeOn(t *testing.T, c ServeConfig, admin string) *proc {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ln, err := net.Listen("tcp", admin)
		if err == nil {
			ln.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin address %s not free again: %v", admin, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.AdminListen = admin
	return start(t, &c.Process, func(ctx context.Context) error { return Serve(ctx, c) })
}

// TestGatewayFollowsTheControlPlane runs a gateway with --control-plane
// and no database: it applies what serve publishes, reports itself through
// the API, keeps serving while the API is down, catches up on a
// generation published meanwhile (with the canary weights in force) once
// a new serve answers on the same address, and follows canary events.
func TestGatewayFollowsTheControlPlane(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		store, url := dbtest.NewStore(t)
		a, b := pools(t)
		ctx := context.Background()
		// This test records the canary actions: serve's runner never judges.
		lock, err := store.TryCanaryLock(ctx)
		if err != nil || lock == nil {
			t.Fatalf("TryCanaryLock = %v, %v", lock, err)
		}
		t.Cleanup(func() { lock.Close(context.Background()) })

		const token = "cp-token"
		admin := testnet.FreeAddr(t)
		sc := ServeConfig{Front: front, DatabaseURL: url, AdminToken: token}
		srv := startServeOn(t, sc, admin)
		gc := GatewayConfig{Front: front, ControlPlane: "http://" + admin, ControlPlaneToken: token}
		gc.Heartbeat = 100 * time.Millisecond
		gw := startGateway(t, gc)

		g1 := publishTo(t, store, specJSON(a, b, 100, 0))
		gw.waitApplied(t, g1.ID)
		if got := pool(t, gw.Proxy); got != "pool-a" {
			t.Fatalf("generation %d through the gateway: served by %q, want pool-a", g1.ID, got)
		}

		// Reported through the API (PUT /api/v1/gateways/{id}).
		waitUntil(t, "the gateway listed with its applied generation", func() bool {
			req, _ := http.NewRequest(http.MethodGet, "http://"+admin+"/api/v1/gateways", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			var list apiv1.GatewayList
			if resp := callReq(t, req, &list); resp != http.StatusOK {
				return false
			}
			for _, gi := range list.Items {
				if gi.Listen == gw.Proxy && gi.AppliedGeneration == g1.ID {
					return true
				}
			}
			return false
		}, ticks(t, 50*time.Millisecond))

		// The API goes away: the gateway keeps serving.
		srv.stop()
		for range 10 {
			if got := pool(t, gw.Proxy); got != "pool-a" {
				t.Fatalf("with the API down the gateway serves %q, want pool-a", got)
			}
		}
		// Published behind the API's back, and the canary rolled back to 0
		// before any API is up again.
		g2 := publishTo(t, store, canarySpec(a, b, analysis(10, 1_000_000, 0)))
		if _, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: g2.ID, Service: "web", FromWeight: 10, ToWeight: 0,
			Action: apiv1.CanaryRollback, Reason: "test"}, 10); err != nil || !ok {
			t.Fatalf("Record = %v, %v", ok, err)
		}

		// A new serve on the same address: the gateway reconnects, resyncs and
		// applies generation 2 with the weight in force.
		startServeOn(t, sc, admin)
		gw.waitApplied(t, g2.ID)
		waitWeight(t, 0, gw)
		for i := range 20 {
			if got := pool(t, gw.Proxy); got != "pool-a" {
				t.Fatalf("request %d at canary weight 0 served by %q, want pool-a", i, got)
			}
		}

		// A canary action while the API is up reaches the gateway as an event.
		if _, ok, err := lock.Record(ctx, apiv1.CanaryEvent{GenerationID: g2.ID, Service: "web", FromWeight: 0, ToWeight: 30,
			Action: apiv1.CanaryPromote, Reason: "test"}, 10); err != nil || !ok {
			t.Fatalf("Record = %v, %v", ok, err)
		}
		waitWeight(t, 30, gw)

		// The next publish is one event ahead: loaded by id and applied.
		g3 := publishTo(t, store, specJSON(a, b, 0, 100))
		gw.waitApplied(t, g3.ID)
		if got := pool(t, gw.Proxy); got != "pool-b" {
			t.Errorf("generation %d through the gateway: served by %q, want pool-b", g3.ID, got)
		}
	})
}

// callReq sends req and decodes a 200 answer into out; it returns the
// status, 0 when the call failed.
func callReq(t *testing.T, req *http.Request, out any) int {
	t.Helper()
	resp, err := httpc.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("decode %s: %v", req.URL, err)
		}
	}
	return resp.StatusCode
}
