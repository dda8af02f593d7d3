package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/split"
	"github.com/dwara/dwara/internal/testnet"
)

// The chaos run (make chaos) is gated apart from the fault suite: it runs
// for CHAOS_DURATION and kills processes of its own.
const (
	chaosEnv         = "DWARA_CHAOS"
	chaosDurationEnv = "CHAOS_DURATION"
	chaosSeedEnv     = "CHAOS_SEED"
	defaultChaos     = 3 * time.Minute
)

const (
	// chaosRequestTimeout is each proxied request's deadline.
	chaosRequestTimeout = 10 * time.Second
	// apiBound is the longest an API answer may take: the documented 5 s
	// (--database-timeout, within which a call whose database is away
	// answers 503) and 0.5 s for what the client's clock adds around the
	// server's (scheduling of four dwara processes, PostgreSQL and this
	// test on two shared cores, loopback, the answer's write and read).
	// The 6.0 s answers of issue 22 (the timeout plus the audit's own
	// second) are outside it.
	apiBound = 5*time.Second + 500*time.Millisecond
	// appliedWithin bounds the wait, after the last change, until every
	// proxy applied the newest generation.
	appliedWithin = 5 * time.Second
	// changeEvery is the period of the flips and weight changes.
	changeEvery = 2 * time.Second
	// chaosClients is the number of load clients: 0-3 keep a cookie jar
	// (sticky sessions of service web), 4-5 send web requests without one,
	// 6-7 send requests to the canary group api.
	chaosClients = 8
	// clientInterval paces each client: at most one request started every
	// 5 ms (1,600 a second for the eight), so the run loads the machine
	// without taking it over, and a client refused by a down proxy does
	// not spin.
	clientInterval = 5 * time.Millisecond
	// sessionRequests is how many requests a jar client sends in one
	// session before it starts a new one.
	sessionRequests = 150
	stickyCookie    = "dwara_chaos"
)

// The canary group api: 990/10 with a step of 2 every 2 s at most, judged
// on 10 requests, so the runner acts in nearly every generation (each
// publish brings the spec's weights back, README "Transient weights") and
// never completes within a run; the kills hand the runner's lease over.
var chaosAnalysis = config.CanaryAnalysis{
	Enabled: true, WindowSeconds: 10, Step: 2, MinRequests: 10, CooldownSeconds: 2,
	Promote:  config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.01},
	Rollback: config.Threshold{Metric: config.MetricErrorRate, Threshold: 0.05},
}

const (
	canaryTotal = 1000
	canaryStart = 10
)

func chaosSeed(t *testing.T) uint64 {
	t.Helper()
	v := os.Getenv(chaosSeedEnv)
	if v == "" {
		return uint64(time.Now().UnixNano())
	}
	s, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an unsigned decimal integer (a seed printed by an earlier run)", chaosSeedEnv, v)
	}
	return s
}

// chaos is one run: the fleet, its upstreams and what was seen.
type chaos struct {
	t       *testing.T
	pg      *cluster
	admin   string // serve's admin listener
	serve   *member
	members []*member // serve, replica 1, replica 2, control-plane replica
	web     [2]*upstream
	api     [2]*upstream
	began   time.Time
	outage  outageClock

	mu sync.Mutex
	f  chaosFigures
}

// chaosFigures is what the run counted; guarded by chaos.mu.
type chaosFigures struct {
	requests, ok, failed, toDown int
	byProxy                      map[string]int // judged requests
	failures                     []string       // the first few
	status                       map[int]int    // answers to down proxies, by status (0: no answer)
	downAnswers                  []string       // the first few answers (not 200) of down proxies
	noGeneration                 map[string]int // 503 "No generation loaded" answers, by proxy

	publishes   map[int]int // flips and weight changes by status (0: no answer)
	apiToDown   int         // API calls to a stopped serve
	apiFailures []string    // the first few
	apiFailed   int
	acked       []ackedGeneration // every 201
	maxAPI      time.Duration     // slowest judged API answer
	maxOutage   time.Duration     // slowest during a database outage
	reads       map[int]int       // GET current by status

	faults map[string]int

	sticky         map[stickyObs]string // (session, generation) -> branch that served it
	stickyChecks   int
	stickyWrong    int      // pairs served against the pick, or by two branches
	stickyFailures []string // the first few
}

type ackedGeneration struct {
	id      int64
	message string
	action  string
}

type stickyObs struct {
	session    string
	generation int64
}

// outageClock tells API calls made while PostgreSQL was away (stopped,
// frozen) from the others: seq changes at each start and end of an outage.
type outageClock struct {
	mu   sync.Mutex
	away bool
	seq  int
}

func (o *outageClock) set(away bool) {
	o.mu.Lock()
	o.away = away
	o.seq++
	o.mu.Unlock()
}

func (o *outageClock) begin() (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seq, o.away
}

// during reports whether a call that began at (seq, away) overlapped an
// outage.
func (o *outageClock) during(seq int, away bool) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return away || o.away || o.seq != seq
}

// TestChaos runs `dwara serve`, two database replicas and a control-plane
// replica from the binary on a private PostgreSQL, with two services over
// upstreams of two endpoints each (web: sticky, flipped or reweighted
// through the API every 2 s; api: a canary group the runner promotes),
// under bounded load through every proxy, for CHAOS_DURATION; meanwhile it
// injects faults at random (CHAOS_SEED replays a run): SIGKILL and SIGTERM
// of each process kind, PostgreSQL stopped with -m immediate and frozen
// with SIGSTOP (a gateway restarted during half of those), and endpoints
// killed (one of each upstream always alive). It asserts:
//
//   - no judged request failed (judged: sent to a proxy that was up, i.e.
//     had applied a generation since its start, and not stopped before the
//     answer, unless by SIGTERM, which must drain what it accepted);
//   - every 201 of the API is stored, and every proxy applied the newest
//     generation within 5 s of the last change (the changes stop 3 s
//     after the last fault was healed);
//   - every sticky session was served by the branch the pick of DESIGN
//     section 3 gives its cookie under the generation that served it
//     (FNV-1a 64, hash % total, cumulative weights), and kept its cookie;
//   - the canary events are in order of id, time and generation, and
//     within each generation form one chain from the configured weight,
//     each starting where the previous ended (no gap, no action twice);
//   - no API answer was 500 or slower than apiBound, and every refusal was
//     503 problem+json with Retry-After.
//
// It logs the figures table the README's Reliability section shows.
func TestChaos(t *testing.T) {
	if os.Getenv(chaosEnv) != "1" {
		t.Skipf("the chaos run runs with %s=1 (make chaos); skipped", chaosEnv)
	}
	d := envDuration(t, chaosDurationEnv, defaultChaos, 20*time.Second)
	seed := chaosSeed(t)
	t.Logf("chaos: %v, seed %d (%s=%d replays the faults' choices and times)", d, seed, chaosSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	bin := buildDwara(t)
	h := &chaos{t: t, pg: startCluster(t)}
	h.f.byProxy, h.f.status, h.f.publishes, h.f.reads = map[string]int{}, map[int]int{}, map[int]int{}, map[int]int{}
	h.f.faults, h.f.sticky, h.f.noGeneration = map[string]int{}, map[stickyObs]string{}, map[string]int{}
	h.web = [2]*upstream{startUpstream(t, "web-a", 2, 0), startUpstream(t, "web-b", 2, 0)}
	h.api = [2]*upstream{startUpstream(t, "api-stable", 2, 0), startUpstream(t, "api-canary", 2, 0)}
	h.startFleet(bin)

	h.began = time.Now()
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for c := range chaosClients {
		wg.Go(func() { h.client(c, seed, stopLoad, d+5*time.Minute) })
	}
	stopChanges := make(chan struct{})
	var cw sync.WaitGroup
	cw.Go(func() { h.changes(seed, stopChanges, d+5*time.Minute) })
	cw.Go(func() { h.reads(stopChanges, d+5*time.Minute) })
	endChanges := sync.OnceFunc(func() {
		close(stopChanges)
		cw.Wait()
	})
	endLoad := sync.OnceFunc(func() {
		close(stopLoad)
		wg.Wait()
	})
	// Registered after the processes: the goroutines stop before them.
	t.Cleanup(func() {
		endChanges()
		endLoad()
	})

	h.inject(rng, d)
	// Every fault is healed; the load and the changes run on a little
	// while with the whole fleet up, then the changes stop.
	time.Sleep(3 * time.Second)
	endChanges()
	end := time.Now()
	lag, current := h.appliedByAll(end)
	endLoad()
	t.Logf("chaos: the run took %v", time.Since(h.began).Round(time.Second))

	h.checkAcked(current)
	h.checkSticky()
	h.report(lag, h.checkCanary())
}

// startFleet starts serve, publishes the first generation, and starts the
// replicas.
func (h *chaos) startFleet(bin string) {
	t := h.t
	url := h.pg.URL("dwara_chaos")
	h.admin = testnet.FreeAddr(t)
	proxy := testnet.FreeAddr(t)
	h.serve = newMember(t, "serve", kindServe, bin, proxy, metricGeneration(h.admin),
		"serve", "--listen", proxy, "--admin-listen", h.admin, "--database-url", url)
	h.serve.start()
	h.serve.c.waitStatus(t, "http://"+h.admin+"/healthz", http.StatusOK)
	g := publish(t, h.admin, h.spec(50, 50), "chaos: the first generation")
	h.mu.Lock()
	h.f.acked = append(h.f.acked, ackedGeneration{g.ID, g.Message, g.Action})
	h.mu.Unlock()
	h.serve.awaitReady()
	h.members = []*member{h.serve}
	state := t.TempDir()
	for i := 1; i <= 2; i++ {
		metrics := testnet.FreeAddr(t)
		m := newMember(t, fmt.Sprintf("replica %d", i), kindReplica, bin, testnet.FreeAddr(t), healthGeneration(metrics), "gateway",
			"--database-url", url, "--metrics-listen", metrics, "--state-dir", filepath.Join(state, strconv.Itoa(i)))
		m.args = append(m.args, "--listen", m.proxy)
		h.members = append(h.members, m)
	}
	metrics := testnet.FreeAddr(t)
	cp := newMember(t, "control-plane replica", kindControlPlane, bin, testnet.FreeAddr(t), healthGeneration(metrics), "gateway",
		"--control-plane", "http://"+h.admin, "--metrics-listen", metrics, "--state-dir", filepath.Join(state, "cp"))
	cp.args = append(cp.args, "--listen", cp.proxy)
	h.members = append(h.members, cp)
	for _, m := range h.members[1:] {
		m.launch()
	}
}

// spec is the chaos spec with service web at wa/wb.
func (h *chaos) spec(wa, wb int) json.RawMessage {
	b := spectest.New()
	for _, u := range append(h.web[:], h.api[:]...) {
		b.Upstream(u.name, u.addrs...)
	}
	return b.Split("web", "/", spectest.T(h.web[0].name, wa), spectest.T(h.web[1].name, wb)).Sticky(stickyCookie, 3600).
		Split("api", "/api", spectest.T(h.api[0].name, canaryTotal-canaryStart), spectest.T(h.api[1].name, canaryStart)).
		Analysis(chaosAnalysis).JSON()
}

// client sends requests one after the other, each to a proxy picked at
// random, until stop or bound.
func (h *chaos) client(c int, seed uint64, stop <-chan struct{}, bound time.Duration) {
	rng := rand.New(rand.NewPCG(seed, uint64(c)+1))
	deadline := time.Now().Add(bound)
	var jar http.CookieJar
	hc := &http.Client{Transport: loadClient.Transport, Timeout: chaosRequestTimeout}
	tick := time.NewTicker(clientInterval)
	defer tick.Stop()
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		sticky := c < 4
		if sticky && i%sessionRequests == 0 {
			jar, _ = cookiejar.New(nil)
			hc = &http.Client{Transport: loadClient.Transport, Timeout: chaosRequestTimeout, Jar: jar}
		}
		m := h.members[rng.IntN(len(h.members))]
		path, want := "/web/", [2]*upstream{h.web[0], h.web[1]}
		if c >= 6 {
			path, want = "/api/", h.api
		}
		epoch, up := m.begin()
		session := ""
		if sticky {
			session = cookieValue(jar, m.proxy)
		}
		s, minted, status, err := chaosGet(hc, "http://"+m.proxy+path, want, sticky, session != "")
		judged := m.counts(epoch, up, err)
		h.record(m, judged, s, status, err)
		if sticky && err == nil {
			if session == "" {
				session = minted
			}
			h.observeSticky(session, s)
		}
	}
}

// cookieValue is the sticky session the jar holds for the proxy at addr,
// "" for none.
func cookieValue(jar http.CookieJar, addr string) string {
	u := &url.URL{Scheme: "http", Host: addr, Path: "/"}
	for _, c := range jar.Cookies(u) {
		if c.Name == stickyCookie {
			return c.Value
		}
	}
	return ""
}

// chaosGet sends one GET and checks the answer: a complete 200 from one
// of the want upstreams; for a sticky client, a new cookie exactly when it
// had none. It returns what the upstream saw, the cookie minted (if any),
// and the status (0 without an answer).
func chaosGet(hc *http.Client, target string, want [2]*upstream, sticky, returning bool) (served, string, int, error) {
	resp, err := hc.Get(target)
	if err != nil {
		return served{}, "", 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return served{}, "", resp.StatusCode, fmt.Errorf("status %d, body cut: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK {
		return served{}, "", resp.StatusCode, fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	s, err := parseServed(resp.Header.Get("X-Pool"), body)
	if err != nil {
		return served{}, "", resp.StatusCode, err
	}
	if s.pool != want[0].name && s.pool != want[1].name {
		return s, "", resp.StatusCode, fmt.Errorf("served by %q, want %s or %s: %s", s.pool, want[0].name, want[1].name, body)
	}
	minted := ""
	for _, c := range resp.Cookies() {
		if c.Name == stickyCookie {
			minted = c.Value
		}
	}
	switch {
	case sticky && returning && minted != "":
		return s, "", resp.StatusCode, fmt.Errorf("a returning session got a new cookie %q", minted)
	case sticky && !returning && minted == "":
		return s, "", resp.StatusCode, fmt.Errorf("a new session got no cookie")
	}
	return s, minted, resp.StatusCode, nil
}

// record counts one request.
func (h *chaos) record(m *member, judged bool, s served, status int, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f.requests++
	switch {
	case !judged:
		h.f.toDown++
		h.f.status[status]++
		if status == http.StatusServiceUnavailable && err != nil && strings.Contains(err.Error(), "No generation loaded") {
			h.f.noGeneration[m.name]++
		}
		if status != 0 && status != http.StatusOK && len(h.f.downAnswers) < 10 {
			h.f.downAnswers = append(h.f.downAnswers, fmt.Sprintf("+%v via %s (%s): %v", time.Since(h.began).Round(time.Millisecond), m.name, m.phase(), err))
		}
	case err != nil:
		h.f.failed++
		if len(h.f.failures) < 20 {
			h.f.failures = append(h.f.failures, fmt.Sprintf("+%v via %s: %v", time.Since(h.began).Round(time.Millisecond), m.name, err))
		}
	default:
		h.f.ok++
		h.f.byProxy[m.name]++
	}
}

// observeSticky notes which branch served a session in a generation; two
// branches for one pair fail at once, the expected branch is checked at
// the end.
func (h *chaos) observeSticky(session string, s served) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.f.stickyChecks++
	k := stickyObs{session, s.generation}
	if prev, ok := h.f.sticky[k]; !ok {
		h.f.sticky[k] = s.pool
	} else if prev != s.pool {
		h.f.stickyWrong++
		if len(h.f.stickyFailures) < 20 {
			h.f.stickyFailures = append(h.f.stickyFailures, fmt.Sprintf("session %s in generation %d served by %s and by %s", session, s.generation, prev, s.pool))
		}
	}
}

// changes flips service web and sets its weights through the API in turn,
// one every changeEvery, until stop or bound.
func (h *chaos) changes(seed uint64, stop <-chan struct{}, bound time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 1<<32))
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(changeEvery)
	defer tick.Stop()
	for i := 1; time.Now().Before(deadline); i++ {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		msg := fmt.Sprintf("chaos: change %d", i)
		var call func() apiAnswer
		if i%2 == 1 {
			call = func() apiAnswer {
				return callAPI(http.MethodPost, "http://"+h.admin+"/api/v1/services/web/flip", map[string]any{"message": msg})
			}
		} else {
			wa := rng.IntN(101)
			call = func() apiAnswer {
				return callAPI(http.MethodPut, "http://"+h.admin+"/api/v1/services/web/weights", apiv1.WeightsRequest{
					Weights: map[string]int{h.web[0].name: wa, h.web[1].name: 100 - wa}, Message: msg})
			}
		}
		a, judged := h.callJudged(call)
		h.mu.Lock()
		switch {
		case !judged:
			h.f.apiToDown++
		case a.err == nil && a.status == http.StatusCreated:
			h.f.publishes[a.status]++
			var g apiv1.Generation
			if err := json.Unmarshal(a.body, &g); err != nil || g.ID == 0 || g.Message != msg {
				h.apiFailure("%s: a 201 whose generation does not decode or is another's (%v): %s", msg, err, a)
			} else {
				h.f.acked = append(h.f.acked, ackedGeneration{g.ID, g.Message, g.Action})
			}
		case a.err == nil && a.status == http.StatusOK && strings.Contains(string(a.body), `"unchanged":true`):
			h.f.publishes[a.status]++
		case isUnavailable(a):
			h.f.publishes[a.status]++
		default:
			h.f.publishes[a.status]++
			h.apiFailure("%s: %s, want 201, 200 unchanged, or 503 problem+json with Retry-After", msg, a)
		}
		h.mu.Unlock()
	}
}

// reads GETs the current generation every second until stop or bound:
// 200, or 503 with Retry-After while the database is away.
func (h *chaos) reads(stop <-chan struct{}, bound time.Duration) {
	deadline := time.Now().Add(bound)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		a, judged := h.callJudged(func() apiAnswer {
			return callAPI(http.MethodGet, "http://"+h.admin+"/api/v1/generations/current", nil)
		})
		h.mu.Lock()
		switch {
		case !judged:
			h.f.apiToDown++
		case a.err == nil && a.status == http.StatusOK, isUnavailable(a):
			h.f.reads[a.status]++
		default:
			h.f.reads[a.status]++
			h.apiFailure("GET /api/v1/generations/current: %s, want 200 or 503 problem+json with Retry-After", a)
		}
		h.mu.Unlock()
	}
}

// callJudged makes one API call and judges it by serve's state (a call to
// a stopped serve is not judged); a judged call slower than apiBound is a
// failure. The slowest judged answers, overall and during a database
// outage, are kept.
func (h *chaos) callJudged(call func() apiAnswer) (apiAnswer, bool) {
	epoch, up := h.serve.begin()
	seq, away := h.outage.begin()
	a := call()
	judged := h.serve.counts(epoch, up, a.err)
	during := h.outage.during(seq, away)
	if judged {
		h.mu.Lock()
		h.f.maxAPI = max(h.f.maxAPI, a.took)
		if during {
			h.f.maxOutage = max(h.f.maxOutage, a.took)
		}
		if a.took > apiBound {
			h.apiFailure("an API answer took %v (bound %v, database away: %v): %s", a.took.Round(time.Millisecond), apiBound, during, a)
		}
		h.mu.Unlock()
	}
	return a, judged
}

// apiFailure notes a failed API call; h.mu is held.
func (h *chaos) apiFailure(format string, args ...any) {
	h.f.apiFailed++
	if len(h.f.apiFailures) < 20 {
		h.f.apiFailures = append(h.f.apiFailures, fmt.Sprintf("+%v ", time.Since(h.began).Round(time.Millisecond))+fmt.Sprintf(format, args...))
	}
}

// The faults, dealt from a shuffled deck so that a short run still has
// each kind.
var chaosFaults = []string{
	"SIGKILL " + kindServe, "SIGTERM " + kindServe,
	"SIGKILL " + kindReplica, "SIGTERM " + kindReplica,
	"SIGKILL " + kindControlPlane, "SIGTERM " + kindControlPlane,
	"PostgreSQL stop -m immediate", "PostgreSQL SIGSTOP", "endpoint killed",
}

// gatewayDuringOutage is the fault added to half of the PostgreSQL ones.
const gatewayDuringOutage = "gateway SIGKILLed and restarted while PostgreSQL was away"

// inject deals faults until d has passed since the start, each healed
// before the next: a stopped process started again, PostgreSQL started or
// thawed, an endpoint revived.
func (h *chaos) inject(rng *rand.Rand, d time.Duration) {
	var deck []string
	for time.Since(h.began) < d {
		if len(deck) == 0 {
			deck = slices.Clone(chaosFaults)
			rng.Shuffle(len(deck), func(i, j int) { deck[i], deck[j] = deck[j], deck[i] })
		}
		fault := deck[0]
		deck = deck[1:]
		pause := time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))
		time.Sleep(pause)
		h.t.Logf("+%v: %s", time.Since(h.began).Round(time.Millisecond), h.fault(rng, fault))
		h.mu.Lock()
		h.f.faults[fault]++
		h.mu.Unlock()
	}
}

// fault injects one fault and heals it; it returns what it did.
func (h *chaos) fault(rng *rand.Rand, fault string) string {
	hold := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo))) }
	switch fault {
	case "PostgreSQL stop -m immediate", "PostgreSQL SIGSTOP":
		away := hold(2*time.Second, 8*time.Second)
		h.outage.set(true)
		if fault == "PostgreSQL SIGSTOP" {
			h.pg.freeze()
		} else {
			h.pg.crash()
		}
		extra := ""
		if rng.IntN(2) == 0 {
			// A gateway restarted while the database is away serves its
			// last generation from its state directory.
			time.Sleep(away / 2)
			m := h.members[1+rng.IntN(len(h.members)-1)]
			m.stop(syscall.SIGKILL)
			took := m.launch()
			extra = fmt.Sprintf("; %s SIGKILLed and started again meanwhile, serving again after %v", m.name, took.Round(time.Millisecond))
			h.mu.Lock()
			h.f.faults[gatewayDuringOutage]++
			h.mu.Unlock()
			time.Sleep(away / 2)
		} else {
			time.Sleep(away)
		}
		if fault == "PostgreSQL SIGSTOP" {
			h.pg.thaw()
		} else {
			h.pg.start()
		}
		h.outage.set(false)
		return fmt.Sprintf("%s for %v%s", fault, away.Round(time.Millisecond), extra)
	case "endpoint killed":
		ups := append(h.web[:], h.api[:]...)
		u := ups[rng.IntN(len(ups))]
		i := rng.IntN(len(u.addrs))
		if u.alive() < 2 {
			return "no endpoint killed: " + u.name + " has one alive"
		}
		u.kill(i)
		down := hold(time.Second, 5*time.Second)
		time.Sleep(down)
		if err := u.revive(i); err != nil {
			h.t.Fatal(err)
		}
		return fmt.Sprintf("endpoint %s of %s killed for %v", u.addrs[i], u.name, down.Round(time.Millisecond))
	}
	sig, kind, _ := strings.Cut(fault, " ")
	var pick []*member
	for _, m := range h.members {
		if m.kind == kind {
			pick = append(pick, m)
		}
	}
	m := pick[rng.IntN(len(pick))]
	s := syscall.SIGKILL
	if sig == "SIGTERM" {
		s = syscall.SIGTERM
	}
	t0 := time.Now()
	m.stop(s)
	stopped := time.Since(t0)
	time.Sleep(hold(200*time.Millisecond, 2*time.Second))
	took := m.launch()
	return fmt.Sprintf("%s %s (exited after %v), started again: serving after %v", sig, m.name, stopped.Round(time.Millisecond), took.Round(time.Millisecond))
}

// appliedByAll returns how long after end every proxy applied the current
// generation, and that generation; past appliedWithin it fails the run
// (and waits on a while to say when each proxy did).
func (h *chaos) appliedByAll(end time.Time) (time.Duration, int64) {
	t := h.t
	var cur apiv1.Generation
	getJSON(t, "http://"+h.admin+"/api/v1/generations/current", &cur)
	gens := make([]int64, len(h.members))
	at := make([]time.Duration, len(h.members))
	all := func() bool {
		ok := true
		for i, m := range h.members {
			if gens[i] == cur.ID {
				continue
			}
			g, err := m.applied()
			if err == nil {
				gens[i] = g
				if g == cur.ID {
					at[i] = time.Since(end)
				}
			}
			ok = ok && err == nil && g == cur.ID
		}
		return ok
	}
	_, ok := until(appliedWithin+time.Minute, 20*time.Millisecond, all)
	lag := slices.Max(at)
	if !ok || lag > appliedWithin {
		var s []string
		for i, m := range h.members {
			s = append(s, fmt.Sprintf("%s: %d after %v", m.name, gens[i], at[i].Round(time.Millisecond)))
		}
		t.Errorf("not every proxy applied the current generation %d within %v of the last change: %s", cur.ID, appliedWithin, strings.Join(s, ", "))
	}
	return lag, cur.ID
}

// checkAcked reads every generation the API answered 201 for back from
// the API.
func (h *chaos) checkAcked(current int64) {
	t := h.t
	h.mu.Lock()
	acked := slices.Clone(h.f.acked)
	h.mu.Unlock()
	lost := 0
	for _, a := range acked {
		ans := callAPI(http.MethodGet, fmt.Sprintf("http://%s/api/v1/generations/%d", h.admin, a.id), nil)
		var g apiv1.Generation
		if ans.err != nil || ans.status != http.StatusOK || json.Unmarshal(ans.body, &g) != nil || g.Message != a.message || g.Action != a.action {
			lost++
			if lost <= 10 {
				t.Errorf("generation %d (%s %q) was answered 201, but GET gives %s", a.id, a.action, a.message, ans)
			}
		}
		if a.id > current {
			t.Errorf("generation %d was answered 201, but the current one is %d", a.id, current)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d generations answered 201 are not stored as answered", lost, len(acked))
	}
}

// checkSticky checks every (session, generation) served against the pick
// of that generation's weights for the session's cookie.
func (h *chaos) checkSticky() {
	t := h.t
	h.mu.Lock()
	obs := h.f.sticky
	failures := slices.Clone(h.f.stickyFailures)
	h.mu.Unlock()
	splits := map[int64]func(string) string{}
	wrong := 0
	for k, pool := range obs {
		pick, ok := splits[k.generation]
		if !ok {
			pick = h.webPick(k.generation)
			splits[k.generation] = pick
		}
		if want := pick(k.session); want != pool {
			wrong++
			if len(failures) < 20 {
				failures = append(failures, fmt.Sprintf("session %s in generation %d served by %s, the pick gives %s", k.session, k.generation, pool, want))
			}
		}
	}
	for _, f := range failures {
		t.Errorf("sticky: %s", f)
	}
	h.mu.Lock()
	h.f.stickyWrong += wrong
	wrong = h.f.stickyWrong
	h.mu.Unlock()
	if wrong > 0 {
		t.Errorf("sticky: %d of %d (session, generation) pairs served against the pick (or by two branches)", wrong, len(obs))
	}
}

// webPick returns the pick of service web in generation id: the upstream
// a key goes to.
func (h *chaos) webPick(id int64) func(string) string {
	t := h.t
	var g apiv1.Generation
	getJSON(t, fmt.Sprintf("http://%s/api/v1/generations/%d", h.admin, id), &g)
	spec, err := config.ParseAs(g.Spec, config.FormatJSON)
	if err != nil {
		t.Fatalf("generation %d: %v", id, err)
	}
	for _, svc := range spec.Services {
		if svc.Name != "web" || svc.Split == nil {
			continue
		}
		weights := make([]int, len(svc.Split.Targets))
		for i, tg := range svc.Split.Targets {
			weights[i] = tg.Weight
		}
		sp, err := split.New(weights)
		if err != nil {
			t.Fatalf("generation %d: weights %v: %v", id, weights, err)
		}
		targets := svc.Split.Targets
		return func(key string) string { return targets[sp.Pick(key)].Upstream }
	}
	t.Fatalf("generation %d has no split service web", id)
	return nil
}

// checkCanary reads every canary event of group api, oldest first, and
// checks they form one chain: in order of id, time and generation (an
// event of a generation older than one already recorded would be a runner
// acting on a generation that is not the newest), and contiguous across
// generations from the configured weight (the run changes only web, so
// every generation carries api's canary over, README "Auto-canary
// analysis"), each event starting where the one before ended and moving by
// the step its action says (no gap, no action made twice, no canary put
// back by a publish). It returns the number of
// events, of generations with events, the longest chain of one generation
// and the runner handovers (consecutive events recorded by different
// instances).
func (h *chaos) checkCanary() canaryFigures {
	t := h.t
	var es []apiv1.CanaryEvent
	query := "service=api&limit=500"
	for range 1000 {
		var page apiv1.CanaryEventList
		getJSON(t, "http://"+h.admin+"/api/v1/canary/events?"+query, &page)
		es = append(es, page.Items...)
		if page.NextCursor == "" {
			break
		}
		query = "service=api&limit=500&cursor=" + url.QueryEscape(page.NextCursor)
	}
	slices.Reverse(es)
	var cf canaryFigures
	cf.events = len(es)
	w, chain := canaryStart, 0
	for i, e := range es {
		if i == 0 || e.GenerationID != es[i-1].GenerationID {
			// Carried over: the chain goes on where it was.
			cf.generations++
		}
		if i > 0 {
			p := es[i-1]
			if e.ID <= p.ID || e.CreatedAt.Before(p.CreatedAt) || e.GenerationID < p.GenerationID {
				t.Errorf("canary event %d (id %d, generation %d, at %v) after id %d (generation %d, at %v): out of order",
					i, e.ID, e.GenerationID, e.CreatedAt, p.ID, p.GenerationID, p.CreatedAt)
			}
			if e.InstanceID != p.InstanceID {
				cf.handovers++
			}
		}
		want := w
		switch e.Action {
		case apiv1.CanaryPromote:
			want = min(w+chaosAnalysis.Step, canaryTotal)
		case apiv1.CanaryRollback:
			want = max(w-chaosAnalysis.Step, 0)
		case apiv1.CanarySevereRollback:
			want = 0
		}
		if e.FromWeight != w || e.ToWeight != want || want == w {
			cf.broken++
			t.Errorf("canary event %d (id %d, generation %d, by %s): %s %d -> %d; the chain (carried over every generation) is at %d, so want %d -> %d",
				i, e.ID, e.GenerationID, e.InstanceID, e.Action, e.FromWeight, e.ToWeight, w, w, want)
		}
		if e.Action == apiv1.CanarySevereRollback || e.Action == apiv1.CanaryRollback && e.ToWeight == 0 {
			chain = 0
		} else {
			chain++
		}
		cf.longest = max(cf.longest, chain)
		w = e.ToWeight
	}
	if len(es) == 0 {
		t.Errorf("no canary event of group api in the whole run")
	}
	return cf
}

// canaryFigures are what checkCanary found.
type canaryFigures struct {
	events, generations, longest, handovers, broken int
}

// report logs the figures table and fails the run for every failed
// request and API call.
func (h *chaos) report(lag time.Duration, cf canaryFigures) {
	t := h.t
	h.mu.Lock()
	defer h.mu.Unlock()
	f := &h.f
	var b strings.Builder
	row := func(k, v string, args ...any) { fmt.Fprintf(&b, "| %s | %s |\n", k, fmt.Sprintf(v, args...)) }
	b.WriteString("| figure | value |\n|---|---|\n")
	row("requests", "%d total, %d ok, **%d failed**, %d to down proxies", f.requests, f.ok, f.failed, f.toDown)
	var per []string
	for _, m := range h.members {
		per = append(per, fmt.Sprintf("%s %d", m.name, f.byProxy[m.name]))
	}
	row("ok by proxy", "%s", strings.Join(per, ", "))
	var nog []string
	for _, m := range h.members {
		if n := f.noGeneration[m.name]; n > 0 {
			nog = append(nog, fmt.Sprintf("%s %d", m.name, n))
		}
	}
	if len(nog) == 0 {
		nog = []string{"none"}
	}
	row("to down proxies, by answer", "%s; of the 503s, \"No generation loaded\" from %s", statusList(f.status), strings.Join(nog, ", "))
	row("flips and weight changes", "%s; %d calls to a stopped serve", statusList(f.publishes), f.apiToDown)
	row("GET current generation", "%s", statusList(f.reads))
	row(fmt.Sprintf("API failures (500, another status, slower than %v)", apiBound), "**%d**", f.apiFailed)
	row("max API latency", "%v during database outages, %v overall", f.maxOutage.Round(time.Millisecond), f.maxAPI.Round(time.Millisecond))
	row("applied by all after the last change", "%v", lag.Round(time.Millisecond))
	var fl []string
	total := 0
	for _, k := range append(slices.Clone(chaosFaults), gatewayDuringOutage) {
		fl = append(fl, fmt.Sprintf("%s %d", k, f.faults[k]))
		total += f.faults[k]
	}
	row("faults", "%d: %s", total, strings.Join(fl, ", "))
	var rd []string
	for _, m := range h.members {
		first, worst, starts := m.readyFigures()
		rd = append(rd, fmt.Sprintf("%s %d starts (first %v, slowest restart %v)", m.name, starts, first.Round(time.Millisecond), worst.Round(time.Millisecond)))
	}
	row("starts to serving", "%s", strings.Join(rd, "; "))
	row("canary events", "%d in %d generations (the longest chain %d), %d runner handovers, **%d off the chain**", cf.events, cf.generations, cf.longest, cf.handovers, cf.broken)
	row("sticky checks", "%d requests of %d sessions over %d (session, generation) pairs, **%d wrong**", f.stickyChecks, sessions(f.sticky), len(f.sticky), f.stickyWrong)
	t.Logf("chaos figures (%s=%s):\n%s", chaosDurationEnv, os.Getenv(chaosDurationEnv), b.String())
	for _, s := range f.downAnswers {
		t.Logf("an answer of a down proxy: %s", s)
	}

	for _, s := range f.failures {
		t.Errorf("failed request: %s", s)
	}
	if f.failed > 0 {
		t.Errorf("%d of %d judged requests failed, want 0", f.failed, f.ok+f.failed)
	}
	for _, s := range f.apiFailures {
		t.Errorf("API: %s", s)
	}
	if f.apiFailed > 0 {
		t.Errorf("%d API calls failed, want 0", f.apiFailed)
	}
	if f.ok == 0 || f.publishes[http.StatusCreated] == 0 {
		t.Errorf("nothing was tested: %d requests ok, %d changes published", f.ok, f.publishes[http.StatusCreated])
	}
}

func statusList(m map[int]int) string {
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := strconv.Itoa(k)
		if k == 0 {
			name = "no answer"
		}
		s = append(s, fmt.Sprintf("%s %d", name, m[k]))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func sessions(obs map[stickyObs]string) int {
	seen := map[string]bool{}
	for k := range obs {
		seen[k.session] = true
	}
	return len(seen)
}
