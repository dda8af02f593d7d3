package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/api"
	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
)

// runWriter runs w until the test ends.
func runWriter(t *testing.T, w *ExposureWriter) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// TestExposuresThroughTheAPI: 200 new sticky sessions through a real proxy
// are 200 rows, each with the branch that answered, the generation and the
// branch's share, listed by GET /api/v1/exposures page by page, and the
// summary's counts add up.
func TestExposuresThroughTheAPI(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	a, err := demo.StartPool("a", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	b, err := demo.StartPool("b", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	spec := spectest.SplitOver([]*demo.Pool{a, b}, 70, 30).Sticky("sid", 0)
	gen := publish(t, store, spec)

	reg := prometheus.NewRegistry()
	q := proxy.NewExposureQueue(0, reg)
	px := proxy.New(proxy.Options{Exposures: q})
	t.Cleanup(px.Close)
	if err := px.Apply(spec.Parsed(t), gen); err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	runWriter(t, &ExposureWriter{Store: store, Instance: "i-1", Queue: q, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Flushed: func(n int) { written.Add(int64(n)) }})
	front := httptest.NewServer(httpfront.Handler(px))
	t.Cleanup(front.Close)

	served := map[string]int{}
	for i := range 200 {
		resp, err := http.Get(front.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 1 {
			t.Fatalf("request %d: %d, cookies %v", i, resp.StatusCode, resp.Cookies())
		}
		served[resp.Header.Get("X-Pool")]++
	}
	waitFor(t, "200 exposures written", func() bool { return written.Load() >= 200 })
	if n := testutil.ToFloat64(q.RecordedCounter(proxy.ExposureSticky)); n != 200 {
		t.Errorf("dwara_exposures_recorded_total{reason=sticky} = %v, want 200", n)
	}

	apiSrv := httptest.NewServer(api.New(api.Options{Store: store, Logger: slog.New(slog.DiscardHandler)}).Handler())
	t.Cleanup(apiSrv.Close)
	var all []apiv1.Exposure
	cursor := ""
	for pages := 0; ; pages++ {
		var page apiv1.ExposureList
		url := fmt.Sprintf("%s/api/v1/exposures?service=web&limit=75", apiSrv.URL)
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		getJSON(t, url, &page)
		all = append(all, page.Items...)
		if cursor = page.NextCursor; cursor == "" {
			if pages != 2 {
				t.Errorf("%d pages of 75, want 3", pages+1)
			}
			break
		}
	}
	if len(all) != 200 {
		t.Fatalf("listed %d exposures, want 200", len(all))
	}
	share := map[string]float64{"a": 0.7, "b": 0.3}
	listed := map[string]int{}
	for i, e := range all {
		if i > 0 && e.ID >= all[i-1].ID {
			t.Fatalf("exposures not newest first: %d then %d", all[i-1].ID, e.ID)
		}
		if e.GenerationID != gen || e.Service != "web" || e.Reason != apiv1.ExposureSticky || e.Share != share[e.Branch] ||
			len(e.KeyHash) != 16 || e.InstanceID != "i-1" || time.Since(e.At) > time.Minute {
			t.Fatalf("exposure %+v", e)
		}
		listed[e.Branch]++
	}
	if listed["a"] != served["a"] || listed["b"] != served["b"] {
		t.Errorf("exposures by branch %v, answers by pool %v", listed, served)
	}
	var onlyB apiv1.ExposureList
	getJSON(t, fmt.Sprintf("%s/api/v1/exposures?service=web&generation=%d&branch=b&reason=sticky&limit=500", apiSrv.URL, gen), &onlyB)
	if len(onlyB.Items) != served["b"] || onlyB.NextCursor != "" {
		t.Errorf("branch b: %d items (cursor %q), want %d", len(onlyB.Items), onlyB.NextCursor, served["b"])
	}
	var none apiv1.ExposureList
	getJSON(t, apiSrv.URL+"/api/v1/exposures?service=web&reason=forced", &none)
	if none.Items == nil || len(none.Items) != 0 {
		t.Errorf("forced: %+v, want an empty list", none)
	}

	var sum apiv1.ExposureSummary
	getJSON(t, apiSrv.URL+"/api/v1/exposures/summary?service=web", &sum)
	var total int64
	for _, c := range sum.Items {
		if c.GenerationID != gen || int(c.Count) != served[c.Branch] {
			t.Errorf("summary item %+v, answers by pool %v", c, served)
		}
		total += c.Count
	}
	if total != 200 || sum.Total != 200 || sum.Reasons[apiv1.ExposureSticky] != 200 ||
		sum.Reasons[apiv1.ExposureRequest] != 0 || sum.Reasons[apiv1.ExposureForced] != 0 || len(sum.Items) != 2 {
		t.Errorf("summary %+v, want 200 sticky over a and b", sum)
	}

	for _, bad := range []string{"/api/v1/exposures?reason=other", "/api/v1/exposures?generation=0", "/api/v1/exposures?limit=501", "/api/v1/exposures/summary"} {
		resp, err := http.Get(apiSrv.URL + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// TestExposureWriterKeepsOneBatch: while the database cannot be reached,
// the writer keeps one batch and drops (and counts) what comes beyond it.
func TestExposureWriterKeepsOneBatch(t *testing.T) {
	t.Parallel()
	store, err := db.Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	q := proxy.NewExposureQueue(100, nil)
	for range 25 {
		q.Expose(proxy.Exposure{At: time.Now().UnixNano(), Generation: 1, Service: "web", Branch: "a", Share: 1, Reason: proxy.ExposureSticky})
	}
	runWriter(t, &ExposureWriter{Store: store, Instance: "i", Queue: q, Batch: 10, Interval: 20 * time.Millisecond, Retention: -1,
		Logger: slog.New(slog.DiscardHandler)})
	waitFor(t, "15 exposures dropped", func() bool { return testutil.ToFloat64(q.DroppedCounter()) == 15 })
	time.Sleep(100 * time.Millisecond) // failed writes retry the kept batch, dropping nothing more
	if d := testutil.ToFloat64(q.DroppedCounter()); d != 15 || len(q.C()) != 0 {
		t.Errorf("dropped %v, %d queued; want 15 dropped, 10 kept", d, len(q.C()))
	}
}

// TestExposurePruning: the writer's pruning deletes the records older than
// the retention and keeps the others; PruneExposures deletes at most its
// limit per call.
func TestExposurePruning(t *testing.T) {
	t.Parallel()
	store, _ := dbtest.NewStore(t)
	ctx := context.Background()
	now := time.Now()
	var rows []db.ExposureRow
	for i := range 30 {
		at := now.Add(-time.Duration(i) * 24 * time.Hour / 2) // every 12 h over 15 days
		rows = append(rows, db.ExposureRow{At: at, Generation: 1, Service: "web", Branch: "a", Share: 1, KeyHash: "00", Reason: apiv1.ExposureSticky})
	}
	if err := store.InsertExposures(ctx, "i", rows); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		l, err := store.ListExposures(ctx, db.ExposureFilter{}, 500, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	// 10 days: rows 21..29 are older.
	if n, err := store.PruneExposures(ctx, 10*24*time.Hour, 4); err != nil || n != 4 {
		t.Fatalf("bounded prune: %d, %v; want 4", n, err)
	}
	if n := count(); n != 26 {
		t.Fatalf("%d left, want 26", n)
	}

	q := proxy.NewExposureQueue(10, nil)
	var pruned atomic.Int64
	runWriter(t, &ExposureWriter{Store: store, Instance: "i", Queue: q, Retention: 7 * 24 * time.Hour, PruneInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), Pruned: func(n int64) { pruned.Add(n) }})
	waitFor(t, "pruning", func() bool { return pruned.Load() > 0 })
	// Kept: ages 0, 12 h, ... 6.5 days (14 rows); 7 days itself is older
	// than the retention by the time the DELETE runs.
	if n := count(); n != 14 {
		t.Errorf("%d left after pruning at 7 days, want 14", n)
	}
}
