package node

import (
	"context"
	"testing"
	"time"

	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/testrun"
)

// A gateway whose source is away at start (its PostgreSQL stopped, or the
// control plane's API down) serves the last generation it saved in its
// state directory: it starts, and its first requests get answers from
// that generation's upstreams.
func TestGatewayStartsFromStateDir(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	// 90/10 under canary analysis, saved with the canary weight 0 that the
	// controller had set since (a rollback): every request goes to pool-a.
	spec, err := config.Parse(canarySpec(a, b, analysis(10, 20, 0)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		with func(c *GatewayConfig)
	}{
		{"database-stopped", func(c *GatewayConfig) {
			c.DatabaseURL = "postgres://dwara@" + testnet.ClosedAddr(t) + "/dwara?sslmode=disable"
		}},
		{"control-plane-down", func(c *GatewayConfig) { c.ControlPlane = "http://" + testnet.ClosedAddr(t) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			sd, err := newStateDir(dir, discard)
			if err != nil {
				t.Fatal(err)
			}
			sd.save(spec, 7)
			sd.saveWeight(7, "web", 0)
			c := GatewayConfig{StateDir: dir}
			c.Listen = "127.0.0.1:0"
			tt.with(&c)
			started := time.Now()
			p := startGateway(t, c)
			var got served
			testrun.Eventually(t, "an answer from the saved generation", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				s, err := get(ctx, p.Proxy)
				got = s
				return err == nil
			})
			t.Logf("first answer %v after the start", time.Since(started).Round(time.Millisecond))
			if got.generation != 7 {
				t.Errorf("served %+v, want generation 7 (the saved one)", got)
			}
			next := ids(11)
			for i := range 100 {
				if pool, code := send(t, p.Proxy, next()); pool != "pool-a" || code != 200 {
					t.Fatalf("request %d: %d from %q, want 200 from pool-a (the saved canary weight 0)", i, code, pool)
				}
			}
		})
	}
}

// The state file is written whole or not at all, and read back as it was
// saved; a directory with no file holds no generation.
func TestStateDirRoundTrip(t *testing.T) {
	t.Parallel()
	a, b := pools(t)
	spec, err := config.Parse(specJSON(a, b, 60, 40))
	if err != nil {
		t.Fatal(err)
	}
	sd, err := newStateDir(t.TempDir(), discard)
	if err != nil {
		t.Fatal(err)
	}
	if got, gen, w, err := sd.load(); got != nil || gen != 0 || w != nil || err != nil {
		t.Fatalf("load of an empty directory = %v, %d, %v, %v; want nothing", got, gen, w, err)
	}
	sd.save(spec, 3)
	sd.saveWeight(3, "web", 20)
	sd.save(spec, 4)            // a new generation starts with no weights of its own
	sd.saveWeight(3, "web", 30) // an older generation's: not kept
	sd.saveWeight(4, "web", 10)
	got, gen, w, err := sd.load()
	if err != nil || gen != 4 || got == nil || len(got.Services) != len(spec.Services) {
		t.Fatalf("load = %+v, %d, %v; want generation 4", got, gen, err)
	}
	if len(w) != 1 || w["web"] != 10 {
		t.Errorf("weights %v, want web: 10", w)
	}
}
