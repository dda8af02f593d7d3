package main

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// settle is the pause between two measurements.
const settle = time.Second

// bench is one run of the comparison: its knobs, its processes, its temp
// directory and the four upstreams shared by every contestant.
type bench struct {
	k         knobs
	ps        *procs
	dir       string
	bins      map[string]string // tool name -> path
	pools     pools
	upstreams []*proc // stable[0], stable[1], canary[0], canary[1]
	wrk       wrkLoad
	versions  string
	logf      func(string, ...any)
}

// run runs the whole comparison and prints the table to stdout; progress
// goes to stderr. Whatever happens, every process it started is stopped and
// its temp directory removed before it returns. It returns an error when a
// contestant did not come up in some round (the table is printed anyway,
// with the contestant marked), or when the run was interrupted or ran out
// of time.
func run(ctx context.Context, k knobs, stdout, stderr io.Writer) (err error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(stderr, "[compare +%3.0fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithTimeoutCause(ctx, k.Deadline, fmt.Errorf("overall deadline of %s passed (DEADLINE)", k.Deadline))
	defer cancel()

	dir, err := os.MkdirTemp("", "dwara-bench-compare-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	b := &bench{k: k, ps: &procs{}, dir: dir, logf: logf}
	defer b.ps.stopAll() // runs before the directory is removed

	if err := b.prepare(ctx); err != nil {
		return err
	}

	tsv, err := openTSV(k.ResultsTSV)
	if err != nil {
		return err
	}
	defer tsv.Close()
	runID := start.UTC().Format("20060102T150405Z")
	logf("raw rows: %s", k.ResultsTSV)

	rng := rand.New(rand.NewPCG(k.Seed, k.Seed^0x9e3779b97f4a7c15))
	var rows []row
	var orders []string
rounds:
	for round := 1; round <= k.Rounds; round++ {
		order := slices.Clone(k.Contestants)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		orders = append(orders, fmt.Sprintf("round %d: %s", round, strings.Join(order, " ")))
		logf("round %d/%d, order: %s", round, k.Rounds, strings.Join(order, " "))
		for slot, name := range order {
			if ctx.Err() != nil {
				break rounds
			}
			r := b.measure(ctx, lookup(name), round, slot+1)
			if ctx.Err() != nil {
				break rounds // an interrupted measurement is no measurement
			}
			rows = append(rows, r)
			if err := writeTSV(tsv, runID, k.Seed, []row{r}); err != nil {
				return err
			}
			if r.Missing != "" {
				logf("   %s: MISSING: %s", name, r.Missing)
			} else {
				logf("   %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms, %.3f CPU s/10k, canary %s%% %s",
					name, r.RPS, ms(r.P50), ms(r.P99), r.cpuPer10k(), num(r.canaryPercent(), 2), r.Note)
			}
			if err := sleepCtx(ctx, settle); err != nil {
				break rounds
			}
		}
	}

	b.header(stdout, start, orders)
	if err := writeTable(stdout, summarize(k.Contestants, rows)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "# raw rows (TSV): %s\n", k.ResultsTSV)

	if ctx.Err() != nil {
		return fmt.Errorf("stopped early: %w", context.Cause(ctx))
	}
	var missing []string
	for _, r := range rows {
		if r.Missing != "" {
			missing = append(missing, fmt.Sprintf("%s in round %d: %s", r.Contestant, r.Round, r.Missing))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d measurement(s) missing:\n  %s", len(missing), strings.Join(missing, "\n  "))
	}
	return nil
}

// prepare finds (or installs) the tools, writes the wrk script and starts
// the upstreams.
func (b *bench) prepare(ctx context.Context) error {
	need := []string{"wrk"}
	dwara := false
	for _, name := range b.k.Contestants {
		switch t := lookup(name).tool; t {
		case "nginx", "haproxy":
			if !slices.Contains(need, t) {
				need = append(need, t)
			}
		case "dwara":
			dwara = true
		}
	}
	if dwara {
		if err := checkExecutable(b.k.DwaraBin); err != nil {
			return fmt.Errorf("dwara binary (DWARA_BIN): %w; run `make build` first", err)
		}
	}
	if err := checkExecutable(b.k.UpstreamBin); err != nil {
		return fmt.Errorf("upstream binary (UPSTREAM_BIN): %w; build it with `go build -o bin/bench-upstream ./bench/upstream`", err)
	}
	bins, err := ensureTools(ctx, b.ps, b.logf, need)
	if err != nil {
		return err
	}
	b.bins = bins
	b.versions = b.toolVersions(ctx)

	script := filepath.Join(b.dir, "report.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o644); err != nil {
		return fmt.Errorf("wrk script: %w", err)
	}
	b.wrk = wrkLoad{Bin: bins["wrk"], Script: script, Threads: b.k.Threads, Connections: b.k.Connections}

	ports := make([]int, 4)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return err
		}
		for slices.Contains(ports[:i], p) {
			if p, err = freePort(); err != nil {
				return err
			}
		}
		ports[i] = p
	}
	b.pools = pools{Stable: [2]int{ports[0], ports[1]}, Canary: [2]int{ports[2], ports[3]}}
	for i, port := range ports {
		pool := "stable"
		if i >= 2 {
			pool = "canary"
		}
		p, err := b.ps.start(fmt.Sprintf("upstream %s %d", pool, port), nil, nil,
			b.k.UpstreamBin, "-listen", fmt.Sprintf("%s:%d", loopback, port), "-pool", pool)
		if err != nil {
			return err
		}
		b.upstreams = append(b.upstreams, p)
	}
	for i, port := range ports {
		if err := waitReady(ctx, port, "/healthz", b.upstreams[i]); err != nil {
			return fmt.Errorf("upstream on %s did not come up: %w", localURL(port, "/"), err)
		}
	}
	b.logf("upstreams up on 127.0.0.1: stable %d %d, canary %d %d", ports[0], ports[1], ports[2], ports[3])
	return nil
}

// measure runs one contestant once: start, wait until ready, warm up
// (discarded), measure while reading CPU times and upstream counts around
// the run, check stickiness, stop. A failure is reported in the row's
// Missing, never as an error.
func (b *bench) measure(ctx context.Context, c contestant, round, slot int) row {
	r := row{Round: round, Slot: slot, Contestant: c.name, Split: c.tool != ""}
	fail := func(err error) row {
		r = row{Round: round, Slot: slot, Contestant: c.name, Split: r.Split, Missing: err.Error()}
		return r
	}
	port, p, err := b.launch(ctx, c, round)
	if err != nil {
		return fail(err)
	}
	if c.tool != "" {
		defer b.ps.stop(p)
	}
	if b.k.Warmup > 0 {
		if _, err := b.wrk.run(ctx, b.ps, port, b.k.Warmup); err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
	}

	s0, c0, err := poolCounts(ctx, b.pools)
	if err != nil {
		return fail(err)
	}
	up0, err := b.upstreamCPU()
	if err != nil {
		return fail(err)
	}
	cpu0, _, err := groupCPU(p.pgid())
	if err != nil {
		return fail(err)
	}
	res, err := b.wrk.run(ctx, b.ps, port, b.k.Duration)
	if err != nil {
		return fail(fmt.Errorf("measured run: %w", err))
	}
	cpu1, members, err := groupCPU(p.pgid())
	if err != nil {
		return fail(err)
	}
	up1, err := b.upstreamCPU()
	if err != nil {
		return fail(err)
	}
	s1, c1, err := poolCounts(ctx, b.pools)
	if err != nil {
		return fail(err)
	}
	if p.exited() || members == 0 {
		return fail(fmt.Errorf("%s exited during the measured run%s", p.name, p.tail(8)))
	}

	r.RPS, r.P50, r.P99 = res.RPS, res.P50, res.P99
	r.Requests, r.Errors = res.Requests, res.Errors
	r.CPU, r.UpstreamCPU = cpu1-cpu0, up1-up0
	r.Stable, r.Canary = s1-s0, c1-c0
	var notes []string
	if res.Errors > 0 {
		notes = append(notes, fmt.Sprintf("wrk errors %d (non-2xx/3xx %d)", res.Errors, res.ErrStatus))
	}
	if c.cookie != "" {
		note, err := stickyCheck(ctx, port, c.cookie, 10)
		if err != nil {
			note = err.Error()
		}
		notes = append(notes, note)
	}
	r.Note = strings.Join(notes, "; ")
	return r
}

// upstreamCPU sums the CPU time of the four upstreams' process groups.
func (b *bench) upstreamCPU() (time.Duration, error) {
	var sum time.Duration
	for _, u := range b.upstreams {
		cpu, _, err := groupCPU(u.pgid())
		if err != nil {
			return 0, err
		}
		sum += cpu
	}
	return sum, nil
}

// header prints what the table was measured on and with.
func (b *bench) header(w io.Writer, start time.Time, orders []string) {
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "\n# dwara bench-compare, %s, took %s\n", start.UTC().Format("2006-01-02 15:04 UTC"), time.Since(start).Round(time.Second))
	fmt.Fprintf(w, "# host: %d CPUs, Linux %s, load avg at the end %s\n", runtime.NumCPU(), strings.TrimSpace(string(kernel)), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Fprintf(w, "# %s\n", b.versions)
	fmt.Fprintf(w, "# wrk -t%d -c%d -d%ds after a %s warm-up (discarded); canary %d%%; %d rounds, seed %d (SEED=%d repeats the orders)\n",
		b.k.Threads, b.k.Connections, int(b.k.Duration/time.Second), b.k.Warmup, b.k.CanaryPercent, b.k.Rounds, b.k.Seed, b.k.Seed)
	for _, o := range orders {
		fmt.Fprintf(w, "#   %s\n", o)
	}
	fmt.Fprintln(w)
}

// toolVersions lists the versions of the tools in use.
func (b *bench) toolVersions(ctx context.Context) string {
	var vs []string
	for _, tool := range []string{"nginx", "haproxy", "wrk"} {
		if p, ok := b.bins[tool]; ok {
			vs = append(vs, tool+" "+toolVersion(ctx, b.ps, p, "-v"))
		}
	}
	vs = append(vs, "go "+runtime.Version())
	if slices.ContainsFunc(b.k.Contestants, func(n string) bool { return lookup(n).tool == "dwara" }) {
		vs = append(vs, "dwara "+buildRevision(b.k.DwaraBin))
	}
	return strings.Join(vs, ", ")
}

// buildRevision describes a Go binary by the VCS revision recorded in it
// ("+dirty" when built from a modified tree) or, without one, by its
// modification time.
func buildRevision(path string) string {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return "?"
	}
	rev, dirty := "", ""
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev != "" {
		return rev + dirty
	}
	if fi, err := os.Stat(path); err == nil {
		return "built " + fi.ModTime().UTC().Format("2006-01-02 15:04 UTC")
	}
	return "?"
}

// lookup returns the contestant called name; names are validated when the
// knobs are parsed.
func lookup(name string) contestant {
	i := slices.IndexFunc(contestants, func(c contestant) bool { return c.name == name })
	return contestants[i]
}

// openTSV opens path for appending and writes the header when it is empty.
func openTSV(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("results tsv: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("results tsv: %w", err)
	}
	if fi, err := f.Stat(); err == nil && fi.Size() == 0 {
		if _, err := io.WriteString(f, tsvHeader); err != nil {
			f.Close()
			return nil, fmt.Errorf("results tsv: %w", err)
		}
	}
	return f, nil
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
