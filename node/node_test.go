package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
)

// applyTarget is the publish-to-applied target on loopback.
const applyTarget = 50 * time.Millisecond

var httpc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}

// proc is an in-process dwara serve or gateway with its bound addresses and
// a channel of the generations its proxy applied from the database.
type proc struct {
	Addrs
	applied chan int64
	latest  atomic.Int64
}

func (p *proc) waitApplied(t testing.TB, gen int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(within)
	for p.latest.Load() < gen {
		select {
		case <-p.applied:
		case <-timeout:
			t.Fatalf("generation %d not applied within %v (latest %d)", gen, within, p.latest.Load())
		}
	}
	return time.Since(start)
}

func start(t testing.TB, run func(context.Context, Config) error, c Config) *proc {
	t.Helper()
	p := &proc{applied: make(chan int64, 1024)}
	started := make(chan Addrs, 1)
	c.Listen, c.AdminListen, c.MetricsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c.Started = func(a Addrs) { started <- a }
	c.Applied = func(g int64) {
		p.latest.Store(g)
		select {
		case p.applied <- g:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, c) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("process stopped with %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("process did not stop within 15s")
		}
	})
	select {
	case p.Addrs = <-started:
	case err := <-done:
		t.Fatalf("process failed to start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("process did not start within 30s")
	}
	return p
}

func pools(t testing.TB) (a, b *demo.Pool) {
	t.Helper()
	var err error
	if a, err = demo.StartPool("pool-a", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	if b, err = demo.StartPool("pool-b", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return a, b
}

func specJSON(a, b *demo.Pool, wa, wb int) json.RawMessage {
	q := func(v []string) string { js, _ := json.Marshal(v); return string(js) }
	return json.RawMessage(fmt.Sprintf(`{
  "upstreams": [{"name": "pool-a", "endpoints": %s}, {"name": "pool-b", "endpoints": %s}],
  "services": [{"name": "web", "split": {"targets": [{"upstream": "pool-a", "weight": %d}, {"upstream": "pool-b", "weight": %d}]}}]
}`, q(a.Addrs), q(b.Addrs), wa, wb))
}

// call sends an API request and decodes a JSON answer into out (when non-nil).
func call(t testing.TB, method, url string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		js, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode request body: %v", err)
		}
		rd = bytes.NewReader(js)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, url, data, err)
		}
	}
	if resp.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, resp.StatusCode, data)
	}
	return resp
}

func publish(t testing.TB, admin string, spec json.RawMessage) db.Generation {
	t.Helper()
	var g db.Generation
	resp := call(t, http.MethodPost, "http://"+admin+"/api/v1/generations", map[string]any{"message": "test", "spec": spec}, &g)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: status %d", resp.StatusCode)
	}
	return g
}

// pool returns the X-Pool of one request through the proxy at addr.
func pool(t testing.TB, addr string) string {
	t.Helper()
	resp, err := httpc.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("GET through %s: %v", addr, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET through %s: status %d", addr, resp.StatusCode)
	}
	return resp.Header.Get("X-Pool")
}

func TestPublishReachesEveryProxy(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	srv := start(t, Serve, Config{DatabaseURL: url, Heartbeat: 100 * time.Millisecond})
	replica := start(t, Gateway, Config{DatabaseURL: url, Heartbeat: 100 * time.Millisecond})

	g1 := publish(t, srv.Admin, specJSON(a, b, 100, 0))
	srv.waitApplied(t, g1.ID, 5*time.Second)
	replica.waitApplied(t, g1.ID, 5*time.Second)
	for _, p := range []*proc{srv, replica} {
		if got := pool(t, p.Proxy); got != "pool-a" {
			t.Errorf("generation 1 through %s: served by %q", p.Proxy, got)
		}
	}

	g2 := publish(t, srv.Admin, specJSON(a, b, 0, 100))
	if g2.ID != g1.ID+1 {
		t.Fatalf("ids %d then %d", g1.ID, g2.ID)
	}
	for name, p := range map[string]*proc{"serve": srv, "replica": replica} {
		d := p.waitApplied(t, g2.ID, 5*time.Second)
		t.Logf("%s applied generation %d %v after the 201", name, g2.ID, d)
		for i := 0; i < 20; i++ {
			if got := pool(t, p.Proxy); got != "pool-b" {
				t.Fatalf("%s: request %d after applying generation 2 served by %q", name, i, got)
			}
		}
	}

	// Both data planes report the generation they applied.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var page struct{ Items []db.GatewayInstance }
		call(t, http.MethodGet, "http://"+srv.Admin+"/api/v1/gateways", nil, &page)
		list := page.Items
		var at2 int
		listens := map[string]bool{}
		for _, gi := range list {
			listens[gi.Listen] = true
			if gi.AppliedGeneration == g2.ID {
				at2++
			}
		}
		if at2 == 2 && listens[srv.Proxy] && listens[replica.Proxy] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateways never both reported generation %d: %+v", g2.ID, list)
		}
		time.Sleep(20 * time.Millisecond) // polling a read model, bounded by the deadline
	}
}

// TestFlipUnderLoad sends traffic from 8 clients through the embedded proxy
// and the replica while the API flips the split twice: no request fails,
// every request sent to the embedded proxy after a flip's 201 is served by
// the new side, and so is every request sent to the replica later than the
// target latency after it.
func TestFlipUnderLoad(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	srv := start(t, Serve, Config{DatabaseURL: url})
	replica := start(t, Gateway, Config{DatabaseURL: url})
	g := publish(t, srv.Admin, specJSON(a, b, 100, 0))
	srv.waitApplied(t, g.ID, 5*time.Second)
	replica.waitApplied(t, g.ID, 5*time.Second)

	type sample struct {
		sent time.Time
		pool string
		addr string
	}
	var (
		mu      sync.Mutex
		samples []sample
		failed  atomic.Int64
		stop    atomic.Bool
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for c := 0; c < 8; c++ {
		addr := srv.Proxy
		if c%2 == 1 {
			addr = replica.Proxy
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20000 && !stop.Load() && ctx.Err() == nil; i++ {
				sent := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
				resp, err := httpc.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					continue
				}
				mu.Lock()
				samples = append(samples, sample{sent, resp.Header.Get("X-Pool"), addr})
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(samples) }
	waitCount := func(n int) {
		for count() < n && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond) // polling a counter fed by the load, bounded by ctx
		}
	}
	// flip returns when the flip request was sent and when its 201 came.
	flip := func() (sent, acked time.Time) {
		sent = time.Now()
		var g db.Generation
		resp := call(t, http.MethodPost, "http://"+srv.Admin+"/api/v1/services/web/flip", map[string]any{"message": "flip"}, &g)
		at := time.Now()
		if resp.StatusCode != http.StatusCreated || g.Action != db.ActionFlip {
			t.Fatalf("flip: %d %+v", resp.StatusCode, g)
		}
		return sent, at
	}
	waitCount(300)
	flip1sent, flip1 := flip()
	waitCount(count() + 600)
	flip2sent, flip2 := flip()
	waitCount(count() + 600)
	stop.Store(true)
	wg.Wait()

	if n := failed.Load(); n != 0 {
		t.Errorf("%d requests failed during the flips", n)
	}
	var late int
	for _, s := range samples {
		// The embedded proxy applies a generation before the API answers
		// 201; a replica follows within the target latency.
		grace := applyTarget
		if s.addr == srv.Proxy {
			grace = 0
		}
		want := ""
		switch {
		case s.sent.After(flip2.Add(grace)):
			want = "pool-a"
		case s.sent.After(flip1.Add(grace)) && s.sent.Before(flip2sent):
			want = "pool-b"
		case s.sent.Before(flip1sent):
			want = "pool-a"
		}
		if want != "" && s.pool != want {
			late++
			if late <= 5 {
				t.Logf("late: via %s sent %v after flip 1, %v after flip 2: %s", s.addr, s.sent.Sub(flip1), s.sent.Sub(flip2), s.pool)
			}
		}
	}
	t.Logf("serve proxy %s, replica %s", srv.Proxy, replica.Proxy)
	if late != 0 {
		t.Errorf("%d of %d requests were served by the old side after a flip (embedded proxy: after the 201; replica: %v after it)", late, len(samples), applyTarget)
	}
	t.Logf("%d requests, 2 flips, 0 failures", len(samples))
}

// BenchmarkPublishToApplied publishes through the API and measures until the
// replica gateway's proxy applied the generation. It reports the p50 and p99
// from sending the POST (publish-*) and from receiving its 201 (commit-*).
func BenchmarkPublishToApplied(b *testing.B) {
	url := dbtest.New(b)
	pa, pb := pools(b)
	srv := start(b, Serve, Config{DatabaseURL: url})
	replica := start(b, Gateway, Config{DatabaseURL: url})
	var fromPost, fromAck []time.Duration
	i := 0
	for b.Loop() {
		i++
		t0 := time.Now()
		g := publish(b, srv.Admin, specJSON(pa, pb, 100-i%100, i%100))
		t1 := time.Now()
		replica.waitApplied(b, g.ID, 5*time.Second)
		fromPost = append(fromPost, time.Since(t0))
		fromAck = append(fromAck, time.Since(t1))
	}
	q := func(lat []time.Duration, p float64) float64 {
		slices.Sort(lat)
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(fromPost, 0.50), "publish-p50-ms")
	b.ReportMetric(q(fromPost, 0.99), "publish-p99-ms")
	b.ReportMetric(q(fromAck, 0.50), "commit-p50-ms")
	b.ReportMetric(q(fromAck, 0.99), "commit-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// TestReplicaSurvivesListenerKill terminates every listener backend of the
// database while a generation is published: the replica reconnects and
// applies it without a restart.
func TestReplicaSurvivesListenerKill(t *testing.T) {
	t.Parallel()
	url := dbtest.New(t)
	a, b := pools(t)
	srv := start(t, Serve, Config{DatabaseURL: url})
	replica := start(t, Gateway, Config{DatabaseURL: url, Resync: time.Hour})
	g1 := publish(t, srv.Admin, specJSON(a, b, 100, 0))
	replica.waitApplied(t, g1.ID, 5*time.Second)

	store, err := db.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var killed int
	err = conn.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, db.ListenerApplicationName).Scan(&killed)
	if err != nil || killed < 2 {
		t.Fatalf("terminated %d listener backends (err %v), want serve's and the replica's", killed, err)
	}
	// Published while the listeners are down or reconnecting: the reconnect
	// loads the newest generation, so it is not missed.
	g2, err := store.Publish(context.Background(), db.PublishParams{Spec: specJSON(a, b, 0, 100), Action: db.ActionCreate, Author: "test"})
	if err != nil {
		t.Fatal(err)
	}
	replica.waitApplied(t, g2.ID, 10*time.Second)
	srv.waitApplied(t, g2.ID, 10*time.Second)
	for _, p := range []*proc{srv, replica} {
		if got := pool(t, p.Proxy); got != "pool-b" {
			t.Errorf("after the reconnect %s serves %q, want pool-b", p.Proxy, got)
		}
	}
}

func TestServeRefusesPublicAdminWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:9090"} {
		err := Serve(context.Background(), Config{AdminListen: addr, DatabaseURL: "postgres://unused", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil || !strings.Contains(err.Error(), "DWARA_ADMIN_TOKEN") {
			t.Errorf("admin listen %s without a token: %v, want a refusal naming DWARA_ADMIN_TOKEN", addr, err)
		}
	}
	for addr, want := range map[string]bool{"127.0.0.1:9090": true, "localhost:1": true, "[::1]:9090": true, "127.5.5.5:1": true, "0.0.0.0:1": false, "example.test:1": false, "garbage": false} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
