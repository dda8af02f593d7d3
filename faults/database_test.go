package faults

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/internal/testrun"
	"github.com/dwara/dwara/node"
)

// outage is how long the database stays away in the outage tests, at
// least.
const outage = 5 * time.Second

// recoverWithin bounds the wait for the API and the replicas after the
// database is back: reconnect backoffs are at most 5 s.
const recoverWithin = 60 * time.Second

// fleet is `dwara serve` and one replica on one database, with two demo
// pools behind them, generation g1 (90/10) applied by both, and 8 clients
// sending GETs through both proxies (client i through procs[i%2]).
type fleet struct {
	srv, replica *proc
	procs        []*proc
	traffic      *load
	g1           apiv1.Generation
}

func startFleet(t *testing.T, url string, bound time.Duration) *fleet {
	t.Helper()
	a, b := pools(t)
	f := &fleet{}
	f.srv = startServe(t, "serve", node.ServeConfig{DatabaseURL: url})
	f.replica = startGateway(t, "replica", node.GatewayConfig{DatabaseURL: url})
	f.procs = []*proc{f.srv, f.replica}
	f.g1 = publish(t, f.srv.Admin, specJSON(a, b, 90, 10), "faults: before the fault")
	for _, p := range f.procs {
		p.waitApplied(t, f.g1.ID, wait)
	}
	f.traffic = startLoad(t, 8, bound, func(c, _ int) (string, error) {
		p := f.procs[c%2]
		if _, err := getVia(p.Proxy); err != nil {
			return "", fmt.Errorf("via %s: %w", p.name, err)
		}
		return p.name, nil
	})
	f.traffic.waitMore(t, 200)
	return f
}

// probeAPI calls the API while the database is away: a read, a mutation
// and readiness, concurrently, and returns each answer by name.
func probeAPI(admin string) map[string]apiAnswer {
	calls := map[string]func() apiAnswer{
		"GET /api/v1/generations/current": func() apiAnswer {
			return callAPI(http.MethodGet, "http://"+admin+"/api/v1/generations/current", nil)
		},
		"POST /api/v1/services/web/flip": func() apiAnswer {
			return callAPI(http.MethodPost, "http://"+admin+"/api/v1/services/web/flip", map[string]any{"message": "faults: flip while the database is away"})
		},
		"PUT /api/v1/services/web/weights": func() apiAnswer {
			return callAPI(http.MethodPut, "http://"+admin+"/api/v1/services/web/weights", map[string]any{"weights": map[string]int{"a": 50, "b": 50}})
		},
		"GET /readyz": func() apiAnswer {
			return callAPI(http.MethodGet, "http://"+admin+"/readyz", nil)
		},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]apiAnswer{}
	for name, call := range calls {
		wg.Go(func() {
			a := call()
			mu.Lock()
			out[name] = a
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// checkProbes asserts that every API call made while the database was away
// was answered 503 problem+json with Retry-After (readiness: 503).
func checkProbes(t *testing.T, when string, probes map[string]apiAnswer) {
	t.Helper()
	for _, name := range slices.Sorted(maps.Keys(probes)) {
		a := probes[name]
		t.Logf("%s: %s -> %s", when, name, a)
		switch {
		case a.err != nil:
			t.Errorf("%s: %s got no answer within the client's %v (%v); want a 503 within the server's bound", when, name, apiClient.Timeout, a.err)
		case name == "GET /readyz":
			if a.status != http.StatusServiceUnavailable {
				t.Errorf("%s: %s answered %d, want 503", when, name, a.status)
			}
		case !isUnavailable(a):
			t.Errorf("%s: %s answered %d (Content-Type %q, Retry-After %q), want 503 application/problem+json with Retry-After",
				when, name, a.status, a.header.Get("Content-Type"), a.header.Get("Retry-After"))
		}
	}
}

// recoverAndPublish waits until the API answers again (without any process
// restarted), publishes a new generation (50/50) and waits until both
// processes applied it; it logs how long each step took from since.
func (f *fleet) recoverAndPublish(t *testing.T, since time.Time, what string) {
	t.Helper()
	took, ok := until(recoverWithin, 100*time.Millisecond, func() bool {
		a := callAPI(http.MethodGet, "http://"+f.srv.Admin+"/api/v1/generations/current", nil)
		return a.err == nil && a.status == http.StatusOK
	})
	if !ok {
		t.Fatalf("the API did not answer 200 within %v of %s", recoverWithin, what)
	}
	t.Logf("the API answers again %v after %s", took.Round(time.Millisecond), what)

	// The current generation is g1, or the flip probe's when it went
	// through once the database answered again; 50/50 is neither.
	var cur apiv1.Generation
	getJSON(t, "http://"+f.srv.Admin+"/api/v1/generations/current", &cur)
	if cur.ID != f.g1.ID {
		t.Logf("the current generation is %d (%s), not %d: a call made during the fault was carried out once the database answered again", cur.ID, cur.Action, f.g1.ID)
	}
	spec := fiftyFifty(t, f.g1.Spec)
	acked := time.Now()
	g := publish(t, f.srv.Admin, spec, "faults: after "+what)
	for _, p := range f.procs {
		at := p.waitApplied(t, g.ID, recoverWithin)
		t.Logf("%s applied generation %d %v after its 201, %v after %s", p.name, g.ID,
			at.Sub(acked).Round(time.Millisecond), at.Sub(since).Round(time.Millisecond), what)
	}
	// The proxies serve it: a request sent now is served by g or newer.
	for _, p := range f.procs {
		s, err := getVia(p.Proxy)
		if err != nil || s.generation < g.ID {
			t.Errorf("%s after generation %d applied: %+v, %v", p.name, g.ID, s, err)
		}
	}
}

// fiftyFifty returns spec (service web split over two targets) at 50/50.
func fiftyFifty(t *testing.T, spec json.RawMessage) json.RawMessage {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(spec, &s); err != nil {
		t.Fatal(err)
	}
	svc := s["services"].([]any)[0].(map[string]any)
	for _, tg := range svc["split"].(map[string]any)["targets"].([]any) {
		tg.(map[string]any)["weight"] = 50
	}
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestDatabaseStoppedAndRestarted stops a private PostgreSQL cluster (fast
// shutdown) under traffic through `dwara serve` and a replica, keeps it away
// for a few seconds and starts it again. No proxied request may fail; the
// API answers 503 problem+json with Retry-After while the database is
// away, answers again after the restart without dwara being restarted, and
// a generation published then is applied by both processes.
func TestDatabaseStoppedAndRestarted(t *testing.T) {
	need(t)
	t.Parallel()
	pg := startCluster(t)
	f := startFleet(t, pg.URL("dwara_faults"), 5*time.Minute)

	before, _ := f.traffic.snapshot()
	pg.stop()
	stopped := time.Now()
	probes := probeAPI(f.srv.Admin) // the pool's connections were just cut
	f.traffic.waitMore(t, 200)      // traffic flows while the database is away
	if rest := outage - time.Since(stopped); rest > 0 {
		time.Sleep(rest)
	}
	later := probeAPI(f.srv.Admin) // connections are refused by now
	during, _ := f.traffic.snapshot()
	pg.start()
	restarted := time.Now()
	t.Logf("the database was away %.1f s; %d requests were proxied meanwhile", restarted.Sub(stopped).Seconds(), during-before)

	f.recoverAndPublish(t, restarted, "the database restart")
	f.traffic.waitMore(t, 200)
	f.traffic.report(t, "GETs through serve and the replica")
	checkProbes(t, "database just stopped", probes)
	checkProbes(t, fmt.Sprintf("database stopped for %v", outage), later)
}

// TestDatabaseHung freezes every process of a private PostgreSQL cluster
// (SIGSTOP: connections stay open, nothing answers) under traffic, then
// thaws it. No proxied request may fail; an API call during the hang must
// be answered 503 within the server's bound rather than hang until the
// client gives up (the client waits 20 s); after SIGCONT everything
// recovers without a restart.
func TestDatabaseHung(t *testing.T) {
	need(t)
	t.Parallel()
	pg := startCluster(t)
	f := startFleet(t, pg.URL("dwara_faults"), 5*time.Minute)
	// Registered after the processes: thawed before they are stopped, even
	// when the test fails half-way.
	t.Cleanup(func() { pg.thaw() })

	before, _ := f.traffic.snapshot()
	n := pg.freeze()
	frozen := time.Now()
	probes := probeAPI(f.srv.Admin) // returns within the client timeout (20 s) at most
	f.traffic.waitMore(t, 200)
	if rest := outage + time.Second - time.Since(frozen); rest > 0 {
		time.Sleep(rest)
	}
	during, _ := f.traffic.snapshot()
	pg.thaw()
	thawed := time.Now()
	t.Logf("%d PostgreSQL processes were frozen %.1f s; %d requests were proxied meanwhile", n, thawed.Sub(frozen).Seconds(), during-before)

	f.recoverAndPublish(t, thawed, "SIGCONT")
	f.traffic.waitMore(t, 200)
	f.traffic.report(t, "GETs through serve and the replica")
	checkProbes(t, "database hung", probes)
}

// TestFailedPublishIsNotAnnounced makes the database refuse one publish (a
// trigger raises on an INSERT into generations whose message carries a
// marker): the API answers an error, nothing is announced on
// dwara_generation (the next notification is the next good publish's, whose
// id follows the previous one), no proxy applies anything, and the audit
// log has the refused call.
func TestFailedPublishIsNotAnnounced(t *testing.T) {
	need(t)
	t.Parallel()
	url := dbtest.New(t)
	const marker = "[faults: refuse]"
	dbtest.Exec(t, url, `
		CREATE FUNCTION faults_refuse_marked() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF position('`+marker+`' in NEW.message) > 0 THEN
				RAISE EXCEPTION 'faults: this insert is refused on purpose';
			END IF;
			RETURN NEW;
		END $$`)
	dbtest.Exec(t, url, `CREATE TRIGGER faults_refuse_marked BEFORE INSERT ON generations
		FOR EACH ROW EXECUTE FUNCTION faults_refuse_marked()`)
	notes := dbtest.Watch(t, url, db.NotifyChannel)
	a, b := pools(t)
	srv := startServe(t, "serve", node.ServeConfig{DatabaseURL: url})
	replica := startGateway(t, "replica", node.GatewayConfig{DatabaseURL: url})

	g1 := publish(t, srv.Admin, specJSON(a, b, 90, 10), "faults: good")
	// Both apply generation 1 before anything else is published, so the
	// order checked below is the order of the publishes (a replica that
	// hears two notifications at once applies only the newest).
	for _, p := range []*proc{srv, replica} {
		p.waitApplied(t, g1.ID, wait)
	}
	if n := testrun.Recv(t, notes, "the notification of generation 1"); n != fmt.Sprint(g1.ID) {
		t.Fatalf("notification %q, want %d", n, g1.ID)
	}

	bad := callAPI(http.MethodPost, "http://"+srv.Admin+"/api/v1/generations",
		map[string]any{"message": marker + " refused by the database", "spec": specJSON(a, b, 10, 90)})
	t.Logf("the refused publish: %s", bad)
	if bad.err != nil || bad.status < 400 {
		t.Fatalf("the publish the database refused: %s; want an error answer", bad)
	}
	if !strings.HasPrefix(bad.header.Get("Content-Type"), "application/problem+json") {
		t.Errorf("the refused publish answered Content-Type %q, want application/problem+json", bad.header.Get("Content-Type"))
	}
	if strings.Contains(string(bad.body), "on purpose") {
		t.Errorf("the refused publish shows the database's error to the client: %s", bad.body)
	}

	g2 := publish(t, srv.Admin, specJSON(a, b, 50, 50), "faults: good again")
	if g2.ID != g1.ID+1 {
		t.Errorf("the publish after the refused one got id %d, want %d (the refused one stored nothing)", g2.ID, g1.ID+1)
	}
	// Notifications arrive in commit order: had the refused publish
	// announced anything, it would come before generation 2's.
	if n := testrun.Recv(t, notes, "the notification of generation 2"); n != fmt.Sprint(g2.ID) {
		t.Errorf("the notification after the refused publish is %q, want %d", n, g2.ID)
	}
	for _, p := range []*proc{srv, replica} {
		p.waitApplied(t, g2.ID, wait)
		if got := p.appliedOrder(); !slices.Equal(got, []int64{g1.ID, g2.ID}) {
			t.Errorf("%s applied %v, want [%d %d]", p.name, got, g1.ID, g2.ID)
		}
	}

	var gens apiv1.GenerationList
	getJSON(t, "http://"+srv.Admin+"/api/v1/generations", &gens)
	if len(gens.Items) != 2 {
		t.Errorf("the API lists %d generations, want 2: %+v", len(gens.Items), gens.Items)
	}
	var audit apiv1.AuditList
	getJSON(t, "http://"+srv.Admin+"/api/v1/audit?limit=20", &audit)
	found := false
	for _, e := range audit.Items {
		if e.Action == apiv1.ActionCreate && e.Outcome == apiv1.OutcomeRefused && strings.Contains(string(e.Detail), marker) {
			found = true
			t.Logf("audit entry of the refused publish: status %d, detail %s", e.Status, e.Detail)
			if e.Status != bad.status {
				t.Errorf("the audit entry says status %d, the client got %d", e.Status, bad.status)
			}
			if e.GenerationID != nil {
				t.Errorf("the audit entry of the refused publish names generation %d", *e.GenerationID)
			}
		}
	}
	if !found {
		t.Errorf("no refused create with the marker in the audit log: %+v", audit.Items)
	}
}

// TestReplicaCatchesUp stops a replica, publishes three generations while
// no replica runs, and starts a replica again: it applies the newest at
// once, and none of the ones in between.
func TestReplicaCatchesUp(t *testing.T) {
	need(t)
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	srv := startServe(t, "serve", node.ServeConfig{DatabaseURL: url})
	// No resync: what the new replica applies, it loaded at start.
	cfg := node.GatewayConfig{DatabaseURL: url, Process: node.Process{Resync: time.Hour}}
	first := startGateway(t, "replica", cfg)
	g1 := publish(t, srv.Admin, specJSON(a, b, 90, 10), "faults: replica up")
	first.waitApplied(t, g1.ID, wait)
	first.stop()

	var last apiv1.Generation
	for i, w := range [][2]int{{10, 90}, {100, 0}, {0, 100}} {
		last = publish(t, srv.Admin, specJSON(a, b, w[0], w[1]), fmt.Sprintf("faults: replica down, %d", i+1))
	}
	t0 := time.Now()
	again := startGateway(t, "replica again", cfg)
	t1 := time.Now()
	at := again.waitApplied(t, last.ID, wait)
	t.Logf("the restarted replica applied generation %d %v after it was started (%v after its listeners were bound)", last.ID,
		at.Sub(t0).Round(time.Millisecond), at.Sub(t1).Round(time.Millisecond))
	if got := again.appliedOrder(); !slices.Equal(got, []int64{last.ID}) {
		t.Errorf("the restarted replica applied %v, want only the newest, [%d]", got, last.ID)
	}
	for i := range 20 {
		s, err := getVia(again.Proxy)
		if err != nil || s.pool != "pool-b" || s.generation != last.ID {
			t.Fatalf("request %d through the restarted replica: %+v, %v; want pool-b at generation %d", i, s, err, last.ID)
		}
	}
}

// getJSON GETs url and decodes its 200 answer into out.
func getJSON(t *testing.T, url string, out any) {
	t.Helper()
	a := callAPI(http.MethodGet, url, nil)
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("GET %s: %s", url, a)
	}
	if err := json.Unmarshal(a.body, out); err != nil {
		t.Fatalf("GET %s: decode %s: %v", url, a.body, err)
	}
}
