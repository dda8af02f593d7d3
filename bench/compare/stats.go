package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// reference is the contestant every ratio is taken against, round by round.
const reference = "nginx"

// row is one contestant's measured run of one workload in one round, or
// the reason it has none.
type row struct {
	Round      int // 1-based
	Slot       int // 1-based position in the order of the round's workload
	Workload   string
	Contestant string
	// Missing, when not empty, says why the contestant has no measurement
	// in this round; the other fields are then zero.
	Missing string
	RPS     float64
	P50     time.Duration
	P99     time.Duration
	// Requests and Errors are the load generator's counts over the
	// measured run.
	Requests int64
	Errors   int64
	// CPU is the CPU time of the contestant's process group over the
	// measured run (for direct: of the upstream it loads).
	CPU time.Duration
	// UpstreamCPU is the CPU time of all four upstreams over the same run.
	UpstreamCPU time.Duration
	// Stable and Canary are the benchmark requests the upstreams of each
	// pool counted over the measured run.
	Stable, Canary int64
	// Split reports whether the contestant splits traffic, so that its
	// canary share means something.
	Split bool
	Note  string
}

// cpuPer10k is CPU seconds per 10,000 requests; NaN without requests.
func (r row) cpuPer10k() float64 {
	if r.Requests <= 0 {
		return math.NaN()
	}
	return r.CPU.Seconds() / float64(r.Requests) * 1e4
}

// cpuPerReq is CPU microseconds per request; NaN without requests.
func (r row) cpuPerReq() float64 { return r.cpuPer10k() * 100 }

// canaryPercent is the realised canary share in percent; NaN when the
// contestant does not split, the upstreams counted nothing, or the
// workload is cache (where the upstreams see only a few misses, if any).
func (r row) canaryPercent() float64 {
	if !r.Split || r.Stable+r.Canary == 0 || r.cached() {
		return math.NaN()
	}
	return 100 * float64(r.Canary) / float64(r.Stable+r.Canary)
}

// cached reports whether r is of the workload cache.
func (r row) cached() bool {
	w, ok := workloadNamed(r.Workload)
	return ok && w.cached()
}

// upstreamPercent is the share of the load generator's requests that the
// upstreams counted, in percent: about 100 without a cache, the misses
// with one; NaN without requests.
func (r row) upstreamPercent() float64 {
	if r.Requests <= 0 {
		return math.NaN()
	}
	return 100 * float64(r.Stable+r.Canary) / float64(r.Requests)
}

// metric is one column of the ratio table.
type metric struct {
	name string
	// ratio is the column heading of its ratio to the reference.
	ratio string
	// better says which way is good, for the legend.
	better string
	value  func(row) float64
}

var metrics = []metric{
	{"req/s", "rps/nginx", "higher", func(r row) float64 { return r.RPS }},
	{"p50", "p50/nginx", "lower", func(r row) float64 { return ms(r.P50) }},
	{"p99", "p99/nginx", "lower", func(r row) float64 { return ms(r.P99) }},
	{"CPU/req", "cpu/nginx", "lower", row.cpuPerReq},
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// spread is the minimum, median and maximum of a sample; N is its size and
// the other fields are NaN when it is 0.
type spread struct {
	Min, Med, Max float64
	N             int
}

// spreadOf computes the spread of xs, ignoring NaNs. The median of an even
// count is the mean of the middle two.
func spreadOf(xs []float64) spread {
	v := slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(v) == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN(), 0}
	}
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{v[0], med, v[n-1], n}
}

// summary is one contestant's line of the table, for one workload.
type summary struct {
	Workload   string
	Contestant string
	Rounds     int // rounds it was scheduled in
	Measured   int // rounds with a measurement
	Missing    []string
	// Abs holds the absolute medians, by metric; Ratio the spread of the
	// per-round ratios to the reference, by metric.
	Abs    []float64
	Ratio  []spread
	Canary spread // realised canary share, percent
	Errors int64  // load generator errors over all rounds
	// Requests and Upstream are the load generator's requests and the
	// upstreams' count over the measured runs of all rounds.
	Requests, Upstream int64
}

// summarize folds rows into one summary per workload and contestant, in
// the order of workloads, then of names; a pair without any row (not run)
// has none. A ratio is taken only in rounds where both the contestant and
// the reference were measured on the same workload and the reference's
// value is positive.
func summarize(workloads, names []string, rows []row) []summary {
	type key struct {
		workload string
		round    int
	}
	ref := map[key]row{}
	for _, r := range rows {
		if r.Contestant == reference && r.Missing == "" {
			ref[key{r.Workload, r.Round}] = r
		}
	}
	var out []summary
	for _, wl := range workloads {
		for _, name := range names {
			if s, ok := summarizeOne(wl, name, rows, func(round int) (row, bool) {
				b, ok := ref[key{wl, round}]
				return b, ok
			}); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// summarizeOne folds the rows of one workload and contestant; ref returns
// the reference's row of a round. It reports false when there is no row.
func summarizeOne(wl, name string, rows []row, ref func(round int) (row, bool)) (summary, bool) {
	s := summary{Workload: wl, Contestant: name}
	abs := make([][]float64, len(metrics))
	ratio := make([][]float64, len(metrics))
	var canary []float64
	for _, r := range rows {
		if r.Contestant != name || r.Workload != wl {
			continue
		}
		s.Rounds++
		if r.Missing != "" {
			s.Missing = append(s.Missing, fmt.Sprintf("round %d: %s", r.Round, r.Missing))
			continue
		}
		s.Measured++
		s.Errors += r.Errors
		s.Requests += r.Requests
		s.Upstream += r.Stable + r.Canary
		canary = append(canary, r.canaryPercent())
		base, hasRef := ref(r.Round)
		for i, m := range metrics {
			v := m.value(r)
			abs[i] = append(abs[i], v)
			if b := m.value(base); hasRef && b > 0 {
				ratio[i] = append(ratio[i], v/b)
			}
		}
	}
	for i := range metrics {
		s.Abs = append(s.Abs, spreadOf(abs[i]).Med)
		s.Ratio = append(s.Ratio, spreadOf(ratio[i]))
	}
	s.Canary = spreadOf(canary)
	return s, s.Rounds > 0
}

// writeTable prints the summaries as one aligned table (a row per
// workload and contestant) followed by its legend and the reasons of any
// missing measurement.
func writeTable(w io.Writer, sums []summary) error {
	// Right-aligned numbers; names padded so they read left-aligned.
	wlWidth, width := len("workload"), len("contestant")
	for _, s := range sums {
		wlWidth = max(wlWidth, len(s.Workload))
		width = max(width, len(s.Contestant))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\t%-*s\trounds\treq/s\tp50 ms\tp99 ms\tCPU us/req\tcanary %%\t", wlWidth, "workload", width, "contestant")
	for _, m := range metrics {
		fmt.Fprintf(tw, "%s\t", m.ratio)
	}
	fmt.Fprintf(tw, "\n%*s\t%*s\t\tmedian\tmedian\tmedian\tmedian\tmedian\t", wlWidth, "", width, "")
	for range metrics {
		fmt.Fprint(tw, "med (min-max)\t")
	}
	fmt.Fprintln(tw)
	for _, s := range sums {
		rounds := fmt.Sprintf("%d/%d", s.Measured, s.Rounds)
		if s.Measured < s.Rounds {
			rounds = "MISSING " + rounds
		}
		fmt.Fprintf(tw, "%-*s\t%-*s\t%s\t%s\t%s\t%s\t%s\t%s\t", wlWidth, s.Workload, width, s.Contestant, rounds,
			num(s.Abs[0], 0), num(s.Abs[1], 2), num(s.Abs[2], 2), num(s.Abs[3], 1), num(s.Canary.Med, 2))
		for _, r := range s.Ratio {
			if r.N == 0 {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%.2f (%.2f-%.2f)\t", r.Med, r.Min, r.Max)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	var legend []string
	for _, m := range metrics {
		legend = append(legend, m.name+" "+m.better)
	}
	fmt.Fprintf(w, "\n# x/nginx: the contestant's value divided by nginx's on the same workload in the same round, median (min-max)\n#   over rounds; better is %s.\n", strings.Join(legend, ", "))
	fmt.Fprint(w, "# CPU us/req: CPU microseconds (user+sys, all processes of its group) per request over the measured run;\n"+
		"#   for direct it is the one upstream's own CPU.\n"+
		"# canary %: share of the measured run's requests the canary upstreams counted.\n"+
		"# *-sticky: the load generator sends no cookie, so every request is a new session: each answer sets a cookie\n"+
		"#   and nothing is ever pinned; this measures the first request of a session, not a sticky steady state.\n")
	for _, s := range sums {
		if wl, ok := workloadNamed(s.Workload); ok && s.Contestant == "direct" && wl.noCeiling != "" {
			fmt.Fprintf(w, "# direct is no ceiling in %s:\n#   %s.\n", wl.name, wl.noCeiling)
		}
	}
	writeUpstreamShares(w, sums, width)
	for _, s := range sums {
		for _, m := range s.Missing {
			fmt.Fprintf(w, "# MISSING %s %s %s\n", s.Workload, s.Contestant, m)
		}
		if s.Errors > 0 {
			fmt.Fprintf(w, "# ERRORS %s %s: the load generator counted %d errors (socket errors, timeouts or non-2xx/3xx)\n", s.Workload, s.Contestant, s.Errors)
		}
	}
	return nil
}

// writeUpstreamShares prints, for each summary of a cached workload, the
// share of its requests that reached an upstream: what shows that the
// cache hit (its canary % is "-": the few misses say nothing of the split).
func writeUpstreamShares(w io.Writer, sums []summary, width int) {
	head := false
	for _, s := range sums {
		if wl, ok := workloadNamed(s.Workload); !ok || !wl.cached() || s.Measured == 0 {
			continue
		}
		if !head {
			fmt.Fprint(w, "# upstream share: in a cache workload, the measured runs' requests (all rounds) that reached an upstream;\n"+
				"#   the others were answered from the proxy's cache, filled by the warm-up. canary % is \"-\" there.\n")
			head = true
		}
		share := math.NaN()
		if s.Requests > 0 {
			share = 100 * float64(s.Upstream) / float64(s.Requests)
		}
		fmt.Fprintf(w, "#   %s %-*s %7s%%  (%d of %d)\n", s.Workload, width, s.Contestant, num(share, 2), s.Upstream, s.Requests)
	}
}

// num formats x with prec decimals, or "-" for NaN.
func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// tsvHeader names the columns written by writeTSV; workload came last, so
// the earlier columns keep their places.
const tsvHeader = "run\tseed\tround\tslot\tcontestant\tstatus\trps\tp50_ms\tp99_ms\trequests\terrors\tcpu_s\tcpu_s_per_10k\tupstream_cpu_s\tstable\tcanary\tcanary_pct\tnote\tworkload\n"

// writeTSV writes rows as tab-separated lines (no header) for run id run
// and seed. Missing values are empty.
func writeTSV(w io.Writer, run string, seed uint64, rows []row) error {
	for _, r := range rows {
		status := "ok"
		if r.Missing != "" {
			status = "missing"
		}
		note := r.Note
		if r.Missing != "" {
			note = r.Missing
		}
		f := func(x float64, prec int) string {
			if math.IsNaN(x) || r.Missing != "" {
				return ""
			}
			return fmt.Sprintf("%.*f", prec, x)
		}
		_, err := fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n",
			run, seed, r.Round, r.Slot, r.Contestant, status,
			f(r.RPS, 1), f(ms(r.P50), 3), f(ms(r.P99), 3), r.Requests, r.Errors,
			f(r.CPU.Seconds(), 2), f(r.cpuPer10k(), 4), f(r.UpstreamCPU.Seconds(), 2),
			r.Stable, r.Canary, f(r.canaryPercent(), 3), tsvField(note), tsvField(r.Workload))
		if err != nil {
			return fmt.Errorf("write tsv: %w", err)
		}
	}
	return nil
}

// tsvField replaces the characters a TSV field cannot hold.
func tsvField(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(s)
}
