package node

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// TestPostgresCostPerReplica measures what replicas cost PostgreSQL (and,
// with --control-plane, serve's API). It runs only with DWARA_SCALE=1:
//
//	DWARA_SCALE=1 go test -run TestPostgresCostPerReplica -v -timeout 20m ./node
//
// DWARA_SCALE_INTERVAL (default 20s) is the length of each phase,
// DWARA_SCALE_REPLICAS (default 4) the number of replicas N.
//
// For each mode (gateway --database-url, then gateway --control-plane) on a
// fresh database it starts serve alone and measures phases of the interval:
// idle; a publish every second through the API; canary traffic (100
// requests/s) through serve's proxy. Then it starts N replicas of the mode
// and measures idle, publish, canary traffic through one replica and
// canary traffic through every replica. Every process has its own
// application_name on its pool's connections (the LISTEN and canary runner
// connections keep their own fixed names), so pg_stat_activity gives the
// connections per process. Transactions are the delta of xact_commit +
// xact_rollback of pg_stat_database for the test database, less the
// monitor's own; window rows are the delta of count(*) of canary_windows;
// API calls (control-plane mode) are counted by a reverse proxy in front of
// serve's admin listener. The cost per replica is (with - without) / N.
func TestPostgresCostPerReplica(t *testing.T) {
	if os.Getenv("DWARA_SCALE") != "1" {
		t.Skip("set DWARA_SCALE=1 to measure the cost per replica")
	}
	interval := 20 * time.Second
	if v := os.Getenv("DWARA_SCALE_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("DWARA_SCALE_INTERVAL: %v", err)
		}
		interval = d
	}
	n := 4
	if v := os.Getenv("DWARA_SCALE_REPLICAS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("DWARA_SCALE_REPLICAS: %q", v)
		}
	}
	for _, mode := range []string{"database", "control-plane"} {
		t.Run(mode, func(t *testing.T) { measureScale(t, mode, n, interval) })
	}
}

// scaleFigures are the measurements of one phase.
type scaleFigures struct {
	xactPerSec    float64        // transactions per second, the monitor's excluded
	windowsPerSec float64        // canary_windows rows inserted per second
	exposPerSec   float64        // exposures rows inserted per second
	apiPerSec     float64        // calls to serve's API through the counting proxy
	apiCalls      map[string]int // those calls by method and path prefix
	connsMax      map[string]int // most connections seen per application_name
	totalMax      int            // most connections of the database seen at once
	requests      int64          // proxied requests sent
}

// scaleMonitor samples the test database over a connection of its own.
type scaleMonitor struct {
	conn *pgx.Conn
	own  int64 // transactions the monitor ran
}

const monitorApplicationName = "dwara-scale-monitor"

func (m *scaleMonitor) counters(t *testing.T) (xact, windows, expos int64) {
	t.Helper()
	ctx := context.Background()
	// The stats of other backends reach pg_stat_database when they flush
	// (at most once a second while busy); this backend's own now.
	if _, err := m.conn.Exec(ctx, "SELECT pg_stat_force_next_flush()"); err != nil {
		t.Fatal(err)
	}
	m.own++
	err := m.conn.QueryRow(ctx, `
		SELECT (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()),
		       (SELECT count(*) FROM canary_windows),
		       (SELECT count(*) FROM exposures)`).Scan(&xact, &windows, &expos)
	if err != nil {
		t.Fatal(err)
	}
	m.own++
	return xact - m.own, windows, expos
}

func (m *scaleMonitor) conns(t *testing.T) (map[string]int, int) {
	t.Helper()
	rows, err := m.conn.Query(context.Background(), `
		SELECT coalesce(nullif(application_name, ''), '(none)'), count(*)
		FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	m.own++
	out := map[string]int{}
	total := 0
	for rows.Next() {
		var name string
		var c int
		if err := rows.Scan(&name, &c); err != nil {
			t.Fatal(err)
		}
		out[name] = c
		total += c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out, total
}

// apiCounter is a reverse proxy in front of serve's admin listener that
// counts the calls through it.
type apiCounter struct {
	mu    sync.Mutex
	calls map[string]int
	total atomic.Int64
	addr  string
}

func startAPICounter(t *testing.T, admin string) *apiCounter {
	t.Helper()
	c := &apiCounter{calls: map[string]int{}}
	tr := &http.Transport{}
	rp := httputil.NewSingleHostReverseProxy(&neturl.URL{Scheme: "http", Host: admin})
	rp.Transport = tr
	rp.FlushInterval = -1
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + r.URL.Path
		if parts := strings.SplitN(r.URL.Path, "/", 5); len(parts) == 5 {
			key = r.Method + " " + strings.Join(parts[:4], "/") + "/..."
		}
		c.mu.Lock()
		c.calls[key]++
		c.mu.Unlock()
		c.total.Add(1)
		rp.ServeHTTP(w, r)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(ln) }()
	t.Cleanup(func() {
		hs.Close()
		<-done
		tr.CloseIdleConnections()
	})
	return c
}

func (c *apiCounter) snapshot() (map[string]int, int64) {
	if c == nil {
		return nil, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.calls))
	for k, v := range c.calls {
		m[k] = v
	}
	return m, c.total.Load()
}

// traffic sends rate requests per second, round-robin over addrs, until
// stop is called; it returns how many it sent.
func traffic(addrs []string, rate int) (stop func() int64) {
	var sent atomic.Int64
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(1, 2))
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+addrs[i%len(addrs)]+"/", nil)
			req.Header.Set("X-Request-Id", fmt.Sprintf("%016x%016x", r.Uint64(), r.Uint64()))
			if resp, err := httpc.Do(req); err == nil {
				resp.Body.Close()
				sent.Add(1)
			}
		}
	}()
	return func() int64 { close(quit); wg.Wait(); return sent.Load() }
}

// withApplicationName returns the database URL u with application_name set.
func withApplicationName(t *testing.T, u, name string) string {
	t.Helper()
	p, err := neturl.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	q.Set("application_name", name)
	p.RawQuery = q.Encode()
	return p.String()
}

func measureScale(t *testing.T, mode string, n int, interval time.Duration) {
	url := dbtest.New(t)
	a, b := pools(t)
	ctx := context.Background()
	mon := &scaleMonitor{}
	conn, err := pgx.Connect(ctx, withApplicationName(t, url, monitorApplicationName))
	if err != nil {
		t.Fatal(err)
	}
	mon.conn = conn
	t.Cleanup(func() { conn.Close(context.Background()) })

	srv := startServe(t, ServeConfig{DatabaseURL: withApplicationName(t, url, "dwara-serve")})
	var api *apiCounter
	if mode == "control-plane" {
		api = startAPICounter(t, srv.Admin)
	}
	// A canary group that is judged every second but never acts.
	ca := analysis(10, 1_000_000_000, 30)
	specs := []json.RawMessage{
		spectest.SplitOver([]*demo.Pool{a, b}, 90, 10).Analysis(ca).JSON(),
		spectest.SplitOver([]*demo.Pool{a, b}, 80, 20).Analysis(ca).JSON(),
	}
	g := publish(t, srv.Admin, specs[0])
	srv.waitApplied(t, g.ID)
	published := 1

	phase := func(name string, via []string, publishing bool) scaleFigures {
		t.Helper()
		time.Sleep(2 * time.Second) // let the previous phase's stats flush
		var stop func() int64
		if via != nil {
			stop = traffic(via, 100)
		}
		x0, w0, e0 := mon.counters(t)
		calls0, a0 := api.snapshot()
		f := scaleFigures{connsMax: map[string]int{}}
		start := time.Now()
		tick := time.NewTicker(time.Second)
		for time.Since(start) < interval {
			<-tick.C
			if publishing {
				publish(t, srv.Admin, specs[published%2])
				published++
			}
			c, total := mon.conns(t)
			for k, v := range c {
				f.connsMax[k] = max(f.connsMax[k], v)
			}
			f.totalMax = max(f.totalMax, total)
		}
		tick.Stop()
		if stop != nil {
			f.requests = stop()
		}
		// Wait for the stats of the last second to flush before reading.
		time.Sleep(1500 * time.Millisecond)
		secs := time.Since(start).Seconds()
		x1, w1, e1 := mon.counters(t)
		calls1, a1 := api.snapshot()
		f.xactPerSec = float64(x1-x0) / secs
		f.windowsPerSec = float64(w1-w0) / secs
		f.exposPerSec = float64(e1-e0) / secs
		f.apiPerSec = float64(a1-a0) / secs
		if calls1 != nil {
			f.apiCalls = map[string]int{}
			for k, v := range calls1 {
				if d := v - calls0[k]; d > 0 {
					f.apiCalls[k] = d
				}
			}
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range f.connsMax {
				if !yield(k) {
					return
				}
			}
		})
		var cs []string
		for _, k := range names {
			if k != monitorApplicationName {
				cs = append(cs, fmt.Sprintf("%s=%d", k, f.connsMax[k]))
			}
		}
		t.Logf("%-28s %6.1f xact/s  %5.2f window rows/s  %5.2f exposure rows/s  %5.2f API calls/s  %4d req  conns max %d (%s)  API %v",
			name, f.xactPerSec, f.windowsPerSec, f.exposPerSec, f.apiPerSec, f.requests, f.totalMax, strings.Join(cs, " "), f.apiCalls)
		return f
	}

	base := map[string]scaleFigures{
		"idle":    phase("serve alone: idle", nil, false),
		"publish": phase("serve alone: publish 1/s", nil, true),
		"canary":  phase("serve alone: canary via serve", []string{srv.Proxy}, false),
	}

	var replicas []*proc
	var proxies []string
	for i := range n {
		var gc GatewayConfig
		if mode == "database" {
			gc.DatabaseURL = withApplicationName(t, url, fmt.Sprintf("dwara-replica-%d", i+1))
		} else {
			gc.ControlPlane = "http://" + api.addr
		}
		r := startGateway(t, gc)
		replicas = append(replicas, r)
		proxies = append(proxies, r.Proxy)
	}
	latest := srv.latest.Load()
	for _, r := range replicas {
		r.waitApplied(t, latest)
	}
	with := map[string]scaleFigures{
		"idle":       phase(fmt.Sprintf("serve + %d: idle", n), nil, false),
		"publish":    phase(fmt.Sprintf("serve + %d: publish 1/s", n), nil, true),
		"canary":     phase(fmt.Sprintf("serve + %d: canary via 1", n), proxies[:1], false),
		"canary-all": phase(fmt.Sprintf("serve + %d: canary via all", n), proxies, false),
	}
	// Every replica applied every generation published meanwhile.
	latest = srv.latest.Load()
	for _, r := range replicas {
		r.waitApplied(t, latest)
	}

	per := func(k, bk string) string {
		w, b := with[k], base[bk]
		return fmt.Sprintf("%+.2f xact/s, %+.2f window rows/s, %+.2f API calls/s, %+.2f connections",
			(w.xactPerSec-b.xactPerSec)/float64(n), (w.windowsPerSec-b.windowsPerSec)/float64(n),
			(w.apiPerSec-b.apiPerSec)/float64(n), float64(w.totalMax-b.totalMax)/float64(n))
	}
	t.Logf("%s mode, per replica (with - without) / %d:", mode, n)
	t.Logf("  idle:                              %s", per("idle", "idle"))
	t.Logf("  publish 1/s:                       %s", per("publish", "publish"))
	t.Logf("  canary traffic via one replica:    %s", per("canary", "canary"))
	t.Logf("  canary traffic via every replica:  %s (against serve alone, idle)", per("canary-all", "idle"))
}
