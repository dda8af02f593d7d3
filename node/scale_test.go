package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db/dbtest"
)

// publishAuthed publishes spec through the API at admin with the admin
// token.
func publishAuthed(t *testing.T, admin, token string, spec json.RawMessage) apiv1.Generation {
	t.Helper()
	js, err := json.Marshal(map[string]any{"message": "test", "spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+admin+"/api/v1/generations", bytes.NewReader(js))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("publish through %s: %v", admin, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish through %s: status %d %s", admin, resp.StatusCode, body)
	}
	var g apiv1.Generation
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatalf("publish through %s: decode %s: %v", admin, body, err)
	}
	return g
}

// TestManyReplicas runs a fleet of seven data planes on one database: two
// serve processes (one admin token), three gateway replicas on the
// database and two gateway replicas following the first serve's API
// (--control-plane). It checks that every publish reaches all seven
// proxies, that a replica restarted after missing two generations serves
// the newest, and that when the process holding the canary runner lock is
// stopped mid-rollout another one continues the rollout to 100 with no
// action taken twice.
//
// The control-plane gateways depend on the first serve ("serve1"), so
// step 3 must not stop it. The test makes sure it never leads: it starts
// serve2 and the database replicas first, waits until one of them holds
// the runner lock, and only then starts serve1 (which cannot take a lock
// that is held) and the control-plane gateways. Step 2 stops a database
// replica that does not lead, so the lock stays where it was; step 3
// checks the leader is not serve1 before stopping it.
func TestManyReplicas(t *testing.T) {
	t.Parallel()
	// One front after another: each runs a fleet of seven processes, and
	// three fleets at once beside the rest of the suite starve them under
	// -race on a small machine.
	eachFront(t, func(t *testing.T, front string) {
		began := time.Now()
		url := dbtest.New(t)
		store := openTestStore(t, url)
		a, b := pools(t)
		const token = "scale-token"

		var mu sync.Mutex
		leading := map[string]bool{}
		leadingChanged := make(chan struct{}, 1)
		onLeading := func(who string) func(bool) {
			return func(on bool) {
				mu.Lock()
				leading[who] = on
				mu.Unlock()
				select {
				case leadingChanged <- struct{}{}:
				default:
				}
			}
		}
		// leaders returns the processes whose runner says it holds the lock.
		leaders := func() []string {
			mu.Lock()
			defer mu.Unlock()
			var on []string
			for who, l := range leading {
				if l {
					on = append(on, who)
				}
			}
			slices.Sort(on)
			return on
		}
		canary := func(p *Process, who string) {
			p.CanaryInterval, p.CanaryLockRetry = canaryInterval, 4*canaryInterval
			p.CanaryLeading = onLeading(who)
		}
		startServeNamed := func(who string) *proc {
			sc := ServeConfig{Front: front, DatabaseURL: url, AdminToken: token}
			canary(&sc.Process, who)
			return startServe(t, sc)
		}
		startDBReplica := func(who string) *proc {
			gc := GatewayConfig{Front: front, DatabaseURL: url}
			canary(&gc.Process, who)
			return startGateway(t, gc)
		}

		// The processes that may lead first: serve2 and the database replicas.
		procs := map[string]*proc{}
		procs["serve2"] = startServeNamed("serve2")
		for i := range 3 {
			who := fmt.Sprintf("db%d", i+1)
			procs[who] = startDBReplica(who)
		}
		waitUntil(t, "a runner holds the lock", func() bool { return len(leaders()) == 1 }, leadingChanged)
		firstLeader := leaders()[0]

		// Then serve1 and the gateways that follow its API.
		procs["serve1"] = startServeNamed("serve1")
		for i := range 2 {
			gc := GatewayConfig{Front: front, ControlPlane: "http://" + procs["serve1"].Admin, ControlPlaneToken: token}
			gc.CanaryInterval = canaryInterval // the flusher's interval; no runner
			gc.Heartbeat = 100 * time.Millisecond
			procs[fmt.Sprintf("cp%d", i+1)] = startGateway(t, gc)
		}
		admin := procs["serve1"].Admin
		names := func() []string {
			ns := make([]string, 0, len(procs))
			for n := range procs {
				ns = append(ns, n)
			}
			slices.Sort(ns)
			return ns
		}
		if len(procs) != 7 {
			t.Fatalf("%d processes, want 7", len(procs))
		}
		t.Logf("fleet of %d started in %v; %s holds the runner lock", len(procs), time.Since(began).Round(time.Millisecond), firstLeader)

		// served checks that a request through every process is served by
		// generation gen from pool want.
		servedBy := func(step string, gen int64, want string) {
			t.Helper()
			for _, n := range names() {
				p := procs[n]
				if !p.appliedWithin(gen, wait) {
					t.Fatalf("%s: %s did not apply generation %d within %v (latest %d)", step, n, gen, wait, p.latest.Load())
				}
				s, err := get(context.Background(), p.Proxy)
				if err != nil {
					t.Fatalf("%s: GET through %s (%s): %v", step, n, p.Proxy, err)
				}
				if s.pool != want || s.generation != gen {
					t.Errorf("%s: through %s served by generation %d from %q, want generation %d from %q", step, n, s.generation, s.pool, gen, want)
				}
			}
		}

		// 1. Every publish is served by all seven proxies.
		phase := time.Now()
		g1 := publishAuthed(t, admin, token, specJSON(a, b, 100, 0))
		servedBy("100/0", g1.ID, "pool-a")
		g2 := publishAuthed(t, admin, token, specJSON(a, b, 0, 100))
		servedBy("flip to 0/100", g2.ID, "pool-b")
		t.Logf("step 1 (two publishes through seven proxies): %v", time.Since(phase).Round(time.Millisecond))

		// 2. A database replica that does not lead is stopped, misses two
		// generations, and a new one catches up.
		phase = time.Now()
		var down string
		for _, n := range []string{"db1", "db2", "db3"} {
			if !slices.Contains(leaders(), n) {
				down = n
				break
			}
		}
		procs[down].stop()
		delete(procs, down)
		// Generation 3 differs from 2 (an unchanged spec is no new generation).
		g3 := publishAuthed(t, admin, token, specJSON(a, b, 50, 50))
		g4 := publishAuthed(t, admin, token, specJSON(a, b, 100, 0))
		if g4.ID != g3.ID+1 || g3.ID != g2.ID+1 {
			t.Fatalf("generation ids %d, %d, %d, %d", g1.ID, g2.ID, g3.ID, g4.ID)
		}
		procs["db4"] = startDBReplica("db4")
		servedBy("after the restart of "+down, g4.ID, "pool-a")
		t.Logf("step 2 (%s stopped, two publishes, db4 started and caught up): %v", down, time.Since(phase).Round(time.Millisecond))

		// 3. The leader is stopped mid-rollout.
		phase = time.Now()
		ls := leaders()
		if len(ls) != 1 {
			t.Fatalf("processes leading: %v, want one", ls)
		}
		leader := ls[0]
		if leader == "serve1" {
			t.Fatalf("serve1, the control plane's API, leads: the test cannot stop it")
		}
		g := publishAuthed(t, admin, token, canarySpec(a, b, analysis(10, 50, 1)))
		var survivors []string
		for _, n := range names() {
			procs[n].waitApplied(t, g.ID)
			if n != leader {
				survivors = append(survivors, n)
			}
		}
		// Traffic round-robin through every process but the leader, so that
		// none is in flight through it when it stops.
		next := ids(7)
		turn := 0
		through := func() string {
			turn++
			return procs[survivors[turn%len(survivors)]].Proxy
		}
		sendRoundRobin := func(max int, what string, done func() bool) {
			t.Helper()
			deadline := time.Now().Add(2 * wait)
			for i := 0; ; i++ {
				if i%20 == 0 && done() {
					return
				}
				if i >= max || time.Now().After(deadline) {
					t.Fatalf("%s: not after %d requests", what, i)
				}
				if _, status := send(t, through(), next()); status != http.StatusOK {
					t.Fatalf("%s: request %d answered %d", what, i, status)
				}
			}
		}
		sendRoundRobin(50000, "two promotions", func() bool { return len(canaryEvents(t, store, g.ID)) >= 2 })
		before := len(canaryEvents(t, store, g.ID))
		procs[leader].stop()
		delete(procs, leader)
		waitUntil(t, "another runner takes the lock", func() bool {
			ls := leaders()
			return len(ls) == 1 && ls[0] != leader
		}, leadingChanged)
		t.Logf("%s stopped after %d events; %s took the lock", leader, before, leaders()[0])
		// One survivor carries the rest: a control-plane gateway, so its
		// windows reach the runner through serve1's API.
		survivors = []string{"cp1"}
		sendRoundRobin(100000, "promoted to 100", func() bool {
			es := canaryEvents(t, store, g.ID)
			return len(es) > 0 && es[len(es)-1].ToWeight == 100
		})
		var all []*proc
		for _, n := range names() {
			all = append(all, procs[n])
		}
		waitWeight(t, 100, all...)

		es := canaryEvents(t, store, g.ID)
		instances := promotionChain(t, es)
		if instances < 2 {
			t.Errorf("events recorded by %d instances, want at least 2", instances)
		}
		t.Logf("step 3 (rollout 10 -> 100 across the handover, %d instances): %v", instances, time.Since(phase).Round(time.Millisecond))
		t.Logf("total: %v", time.Since(began).Round(time.Millisecond))
	})
}
