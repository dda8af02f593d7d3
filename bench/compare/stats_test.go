package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	tests := []struct {
		name string
		in   []float64
		want spread
	}{
		{name: "odd", in: []float64{3, 1, 2}, want: spread{1, 2, 3, 3}},
		{name: "even takes the mean of the middle two", in: []float64{4, 1, 3, 2}, want: spread{1, 2.5, 4, 4}},
		{name: "one", in: []float64{7}, want: spread{7, 7, 7, 1}},
		{name: "NaNs ignored", in: []float64{nan, 5, nan, 1}, want: spread{1, 3, 5, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := spreadOf(tt.in); got != tt.want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		got := spreadOf([]float64{nan})
		if got.N != 0 || !math.IsNaN(got.Min) || !math.IsNaN(got.Med) || !math.IsNaN(got.Max) {
			t.Errorf("spreadOf(NaN) = %+v, want N 0 and NaNs", got)
		}
	})
}

// sampleRows: three rounds of workload get; nginx is missing in round 3,
// so round 3 gives no ratios; dwara did not come up in round 2. Then one
// round of post4k, where the ratios are to post4k's nginx.
func sampleRows() []row {
	ms := time.Millisecond
	rows := []row{
		{Round: 1, Slot: 1, Contestant: "nginx", RPS: 10000, P50: 2 * ms, P99: 8 * ms, Requests: 100000, CPU: 5 * time.Second, Stable: 95000, Canary: 5000, Split: true},
		{Round: 1, Slot: 2, Contestant: "dwara", RPS: 8000, P50: 3 * ms, P99: 10 * ms, Requests: 80000, CPU: 6 * time.Second, Stable: 76000, Canary: 4000, Split: true},
		{Round: 1, Slot: 3, Contestant: "direct", RPS: 30000, P50: 1 * ms, P99: 4 * ms, Requests: 300000, CPU: 9 * time.Second, Stable: 300000},
		{Round: 2, Slot: 1, Contestant: "dwara", Missing: "dwara did not come up", Split: true},
		{Round: 2, Slot: 2, Contestant: "nginx", RPS: 12000, P50: 2 * ms, P99: 6 * ms, Requests: 120000, CPU: 6 * time.Second, Stable: 114000, Canary: 6000, Split: true},
		{Round: 2, Slot: 3, Contestant: "direct", RPS: 36000, P50: 1 * ms, P99: 3 * ms, Requests: 360000, CPU: 9 * time.Second, Stable: 360000},
		{Round: 3, Slot: 1, Contestant: "nginx", Missing: "nginx refused its configuration", Split: true},
		{Round: 3, Slot: 2, Contestant: "dwara", RPS: 9000, P50: 3 * ms, P99: 9 * ms, Requests: 90000, CPU: 4500 * ms, Stable: 85000, Canary: 5000, Split: true, Errors: 3},
		{Round: 3, Slot: 3, Contestant: "direct", RPS: 33000, P50: 1 * ms, P99: 3 * ms, Requests: 330000, CPU: 9 * time.Second, Stable: 330000},
	}
	for i := range rows {
		rows[i].Workload = "get"
	}
	return append(rows,
		row{Round: 1, Slot: 3, Workload: "newconn", Contestant: "direct", RPS: 3000, P50: 9 * ms, P99: 30 * ms, Requests: 30000, CPU: 3 * time.Second, Stable: 30000},
		row{Round: 1, Slot: 1, Workload: "post4k", Contestant: "dwara", RPS: 6000, P50: 4 * ms, P99: 12 * ms, Requests: 60000, CPU: 3 * time.Second, Stable: 57000, Canary: 3000, Split: true},
		row{Round: 1, Slot: 2, Workload: "post4k", Contestant: "nginx", RPS: 5000, P50: 5 * ms, P99: 10 * ms, Requests: 50000, CPU: 3 * time.Second, Stable: 47500, Canary: 2500, Split: true},
	)
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	sums := summarize([]string{"get", "post4k", "tls"}, []string{"direct", "nginx", "dwara"}, sampleRows())
	if len(sums) != 5 {
		t.Fatalf("got %d summaries, want 5 (get: 3, post4k: nginx and dwara, tls: none)", len(sums))
	}
	direct, nginx, dwara := sums[0], sums[1], sums[2]
	for i, want := range []string{"get direct", "get nginx", "get dwara", "post4k nginx", "post4k dwara"} {
		if got := sums[i].Workload + " " + sums[i].Contestant; got != want {
			t.Errorf("summary %d is %s, want %s", i, got, want)
		}
	}

	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	// direct: rps ratios 3.0 (round 1) and 3.0 (round 2); round 3 has no nginx.
	if r := direct.Ratio[0]; r.N != 2 {
		t.Errorf("direct rps ratios: N = %d, want 2 (no nginx in round 3)", r.N)
	}
	near("direct rps ratio median", direct.Ratio[0].Med, 3)
	near("direct absolute rps median (3 rounds)", direct.Abs[0], 33000)
	if direct.Canary.N != 0 {
		t.Errorf("direct has a canary share: %+v", direct.Canary)
	}
	// nginx against itself: exactly 1 where measured.
	if nginx.Measured != 2 || nginx.Rounds != 3 || len(nginx.Missing) != 1 {
		t.Errorf("nginx measured %d/%d, missing %q; want 2/3 and one reason", nginx.Measured, nginx.Rounds, nginx.Missing)
	}
	near("nginx rps ratio min", nginx.Ratio[0].Min, 1)
	near("nginx rps ratio max", nginx.Ratio[0].Max, 1)
	near("nginx canary median", nginx.Canary.Med, 5)
	// dwara: only round 1 has both; p50 3/2, CPU/10k (6/8)/(5/10) = 1.5.
	if dwara.Ratio[1].N != 1 {
		t.Errorf("dwara p50 ratios: N = %d, want 1", dwara.Ratio[1].N)
	}
	near("dwara p50 ratio", dwara.Ratio[1].Med, 1.5)
	near("dwara cpu/req ratio", dwara.Ratio[3].Med, 1.5)
	near("dwara absolute CPU us/req median", dwara.Abs[3], 62.5) // 75 and 50
	near("dwara absolute p99 median", dwara.Abs[2], 9.5)
	near("dwara canary median", dwara.Canary.Med, (5.0+100.0*5000/90000)/2)
	if dwara.Errors != 3 {
		t.Errorf("dwara errors = %d, want 3", dwara.Errors)
	}
	// post4k: against post4k's nginx of the same round, not get's.
	post := sums[4]
	if post.Rounds != 1 || post.Ratio[0].N != 1 {
		t.Fatalf("post4k dwara: %+v", post)
	}
	near("post4k dwara rps ratio", post.Ratio[0].Med, 1.2)
	near("post4k dwara p99 ratio", post.Ratio[2].Med, 1.2)
	near("post4k dwara cpu ratio", post.Ratio[3].Med, 50.0/60)
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := writeTable(&b, summarize([]string{"get", "post4k", "newconn"}, []string{"direct", "nginx", "dwara"}, sampleRows())); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"MISSING 2/3", // both nginx and dwara
		"# MISSING get dwara round 2: dwara did not come up",
		"# MISSING get nginx round 3: nginx refused its configuration",
		"# ERRORS get dwara: the load generator counted 3 errors",
		"every request is a new session",
		"# direct is no ceiling in newconn:\n#   the upstream (Go's net/http) accepts",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "no ceiling in get") {
		t.Error("direct of get is called no ceiling")
	}
	golden(t, "table.txt", b.Bytes())
}

func TestWriteTSV(t *testing.T) {
	t.Parallel()
	rows := sampleRows()
	rows[0].Note = "a\tnote\nwith breaks"
	var b bytes.Buffer
	if err := writeTSV(&b, "run1", 42, rows); err != nil {
		t.Fatal(err)
	}
	cols := strings.Count(tsvHeader, "\t") + 1
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("got %d lines, want %d", len(lines), len(rows))
	}
	for i, l := range lines {
		if n := strings.Count(l, "\t") + 1; n != cols {
			t.Errorf("line %d has %d columns, want %d: %q", i, n, cols, l)
		}
	}
	if !strings.HasPrefix(lines[3], "run1\t42\t2\t1\tdwara\tmissing\t\t") || !strings.HasSuffix(lines[3], "\tdwara did not come up\tget") {
		t.Errorf("missing row = %q, want status missing, empty values, the reason and the workload", lines[3])
	}
	if !strings.HasSuffix(lines[len(lines)-1], "\tpost4k") {
		t.Errorf("last row = %q, want workload post4k in the last column", lines[len(lines)-1])
	}
	if !strings.HasSuffix(tsvHeader, "\tnote\tworkload\n") {
		t.Errorf("tsvHeader = %q, want workload last, after note", tsvHeader)
	}
	if !strings.Contains(lines[0], "\t10000.0\t2.000\t8.000\t100000\t0\t5.00\t0.5000\t") {
		t.Errorf("nginx row = %q", lines[0])
	}
}

// TestWriteTableCache: in the workload cache the canary share is "-" (the
// upstreams see only misses), and below the table each contestant's share
// of requests that reached an upstream, over all its rounds.
func TestWriteTableCache(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	rows := []row{
		{Round: 1, Slot: 1, Contestant: "nginx", RPS: 20000, P50: 2 * ms, P99: 6 * ms, Requests: 100000, CPU: 3 * time.Second, Stable: 3, Canary: 1, Split: true},
		{Round: 1, Slot: 2, Contestant: "dwara", RPS: 22000, P50: 2 * ms, P99: 5 * ms, Requests: 110000, CPU: 3 * time.Second, Split: true},
		{Round: 1, Slot: 3, Contestant: "direct", RPS: 30000, P50: 1 * ms, P99: 4 * ms, Requests: 150000, CPU: 3 * time.Second, Stable: 150003},
		{Round: 2, Slot: 1, Contestant: "dwara", RPS: 21000, P50: 2 * ms, P99: 5 * ms, Requests: 105000, CPU: 3 * time.Second, Stable: 1, Split: true},
		{Round: 2, Slot: 2, Contestant: "nginx", RPS: 19000, P50: 2 * ms, P99: 7 * ms, Requests: 95000, CPU: 3 * time.Second, Split: true},
		{Round: 2, Slot: 3, Contestant: "direct", Missing: "wrk failed"},
	}
	for i := range rows {
		rows[i].Workload = "cache"
	}
	rows = append(rows, row{Round: 1, Slot: 1, Workload: "get", Contestant: "nginx", RPS: 10000, P50: 2 * ms, P99: 8 * ms,
		Requests: 100000, CPU: 5 * time.Second, Stable: 95000, Canary: 5000, Split: true})
	if got := rows[0].canaryPercent(); !math.IsNaN(got) {
		t.Errorf("canary share of a cache row = %v, want NaN", got)
	}
	if got := rows[0].upstreamPercent(); math.Abs(got-0.004) > 1e-9 {
		t.Errorf("upstream share = %v, want 0.004", got)
	}
	if got := rows[len(rows)-1].canaryPercent(); got != 5 {
		t.Errorf("canary share of a get row = %v, want 5", got)
	}
	var b bytes.Buffer
	if err := writeTable(&b, summarize([]string{"get", "cache"}, []string{"direct", "nginx", "dwara"}, rows)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# upstream share: in a cache workload,",
		"#   cache nginx         0.00%  (4 of 195000)\n",
		"#   cache dwara         0.00%  (1 of 215000)\n",
		"#   cache direct      100.00%  (150003 of 150000)\n",
		"# direct is no ceiling in cache:\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	if strings.Contains(out, "#   get nginx") {
		t.Error("a get row has an upstream share")
	}
	golden(t, "table-cache.txt", b.Bytes())
}
