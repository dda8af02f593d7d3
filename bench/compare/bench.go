package main

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// settle is the pause between two measurements.
const settle = time.Second

// maxMissPercent is the share of a cache workload's measured requests
// above which a proxy's row gets a note that its cache is not hitting.
const maxMissPercent = 1.0

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
	h2        h2Load
	tlsLoad   tlsLoad
	scripts   map[string]string // workload name -> path of its wrk script
	// cert is the run's self-signed certificate, made when a workload is
	// served over TLS; tlsClient trusts it; directTLS is the first stable
	// upstream's TLS port, which direct is loaded on for those workloads.
	cert      certFiles
	tlsClient *http.Client
	directTLS int
	// haproxy says what the installed HAProxy can serve.
	haproxy  haproxyCaps
	versions string
	logf     func(string, ...any)
	logs     int // h2load log files written, for their names
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

	// Which contestants run which workload; what cannot run is reported
	// below the table.
	var skipped []string
	runs := map[string][]string{} // workload -> contestants
	for _, w := range k.Workloads {
		for _, name := range k.Contestants {
			if why := b.skipReason(lookup(name), w); why != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", w.name, name, why))
				continue
			}
			runs[w.name] = append(runs[w.name], name)
		}
	}
	for _, s := range skipped {
		logf("skipped: %s", s)
	}

	rng := rand.New(rand.NewPCG(k.Seed, k.Seed^0x9e3779b97f4a7c15))
	var rows []row
	var orders []string
rounds:
	for round := 1; round <= k.Rounds; round++ {
		for _, w := range k.Workloads {
			order := slices.Clone(runs[w.name])
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			orders = append(orders, fmt.Sprintf("round %d %s: %s", round, w.name, strings.Join(order, " ")))
			logf("round %d/%d, workload %s, order: %s", round, k.Rounds, w.name, strings.Join(order, " "))
			for slot, name := range order {
				if ctx.Err() != nil {
					break rounds
				}
				r := b.measure(ctx, lookup(name), w, round, slot+1)
				if ctx.Err() != nil {
					break rounds // an interrupted measurement is no measurement
				}
				rows = append(rows, r)
				if err := writeTSV(tsv, runID, k.Seed, []row{r}); err != nil {
					return err
				}
				if r.Missing != "" {
					logf("   %s %s: MISSING: %s", w.name, name, r.Missing)
				} else {
					share := "canary " + num(r.canaryPercent(), 2)
					if w.cached() {
						share = "upstream " + num(r.upstreamPercent(), 2)
					}
					logf("   %s %s: %.0f req/s, p50 %.2f ms, p99 %.2f ms, %.1f CPU us/req, %s%% %s",
						w.name, name, r.RPS, ms(r.P50), ms(r.P99), r.cpuPerReq(), share, r.Note)
				}
				if err := sleepCtx(ctx, settle); err != nil {
					break rounds
				}
			}
		}
	}

	b.header(stdout, start, orders)
	var wnames []string
	for _, w := range k.Workloads {
		wnames = append(wnames, w.name)
	}
	if err := writeTable(stdout, summarize(wnames, k.Contestants, rows)); err != nil {
		return err
	}
	for _, s := range skipped {
		fmt.Fprintf(stdout, "# SKIPPED %s\n", s)
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

// prepare finds (or installs) the tools, writes the wrk scripts, makes the
// certificate when a workload needs TLS and starts the upstreams.
func (b *bench) prepare(ctx context.Context) error {
	var need []string
	anyTLS, resume := false, false
	for _, w := range b.k.Workloads {
		if t := w.loadGen(); t != tlsLoadTool && !slices.Contains(need, t) {
			need = append(need, t)
		}
		anyTLS = anyTLS || w.tls
		resume = resume || w.resume
	}
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
	if slices.Contains(b.k.Contestants, "dwara-base") { // validate made sure it names one
		if err := checkExecutable(b.k.DwaraBaseBin); err != nil {
			return fmt.Errorf("contestant dwara-base's binary (DWARA_BASE_BIN): %w", err)
		}
	}
	if err := checkExecutable(b.k.UpstreamBin); err != nil {
		return fmt.Errorf("upstream binary (UPSTREAM_BIN): %w; build it with `go build -o bin/bench-upstream ./bench/upstream`", err)
	}
	if resume {
		if err := checkExecutable(b.k.TLSLoadBin); err != nil {
			return fmt.Errorf("workload tlsresume's load generator (TLSLOAD_BIN): %w; build it with `go build -o bin/%s ./bench/tlsload`", err, tlsLoadTool)
		}
	}
	bins, err := ensureTools(ctx, b.ps, b.logf, need)
	if err != nil {
		return err
	}
	b.bins = bins
	b.versions = b.toolVersions(ctx)
	if p, ok := bins["haproxy"]; ok && anyTLS {
		out, err := b.ps.run(ctx, 5*time.Second, "haproxy -vv", nil, p, "-vv")
		if err != nil {
			b.logf("haproxy -vv failed (%v): taking it to have no TLS", err)
		}
		b.haproxy = parseHAProxyCaps(out)
	}

	b.scripts = map[string]string{}
	for _, w := range b.k.Workloads {
		if w.h2 || w.resume {
			continue
		}
		script := filepath.Join(b.dir, "wrk-"+w.name+".lua")
		if err := os.WriteFile(script, []byte(w.wrkScript()), 0o644); err != nil {
			return fmt.Errorf("wrk script: %w", err)
		}
		b.scripts[w.name] = script
	}
	b.wrk = wrkLoad{Bin: bins["wrk"], Threads: b.k.Threads, Connections: b.k.Connections}
	b.h2 = h2Load{Bin: bins["h2load"], Threads: b.k.Threads, Clients: b.k.H2Clients, Streams: b.k.H2Streams}

	if anyTLS {
		if b.cert, err = makeCert(filepath.Join(b.dir, "tls"), time.Now()); err != nil {
			return err
		}
		b.tlsClient = tlsClient(b.cert.pool)
		b.tlsLoad = tlsLoad{Bin: b.k.TLSLoadBin, Threads: b.k.Threads, Clients: b.k.Connections, CA: b.cert.Cert}
		b.logf("self-signed ECDSA P-256 certificate for %s: %s", loopback, b.cert.Cert)
	}

	ports := make([]int, 4, 5) // and the TLS port of the first, when needed
	if anyTLS {
		ports = ports[:5]
	}
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
	for i, port := range ports[:4] {
		pool := "stable"
		if i >= 2 {
			pool = "canary"
		}
		argv := []string{b.k.UpstreamBin, "-listen", fmt.Sprintf("%s:%d", loopback, port), "-pool", pool}
		if i == 0 && anyTLS {
			b.directTLS = ports[4]
			argv = append(argv, "-tls-listen", fmt.Sprintf("%s:%d", loopback, b.directTLS), "-cert", b.cert.Cert, "-key", b.cert.Key)
		}
		p, err := b.ps.start(fmt.Sprintf("upstream %s %d", pool, port), nil, nil, argv...)
		if err != nil {
			return err
		}
		b.upstreams = append(b.upstreams, p)
	}
	for i, port := range ports[:4] {
		if err := waitReady(ctx, client, localURL(port, "/healthz"), b.upstreams[i]); err != nil {
			return fmt.Errorf("upstream on %s did not come up: %w", localURL(port, "/"), err)
		}
	}
	tlsNote := ""
	if anyTLS {
		url := schemeURL("https", b.directTLS, "/healthz")
		if err := waitReady(ctx, b.tlsClient, url, b.upstreams[0]); err != nil {
			return fmt.Errorf("upstream on %s did not come up: %w", url, err)
		}
		tlsNote = fmt.Sprintf("; the first also over TLS on %d", b.directTLS)
	}
	b.logf("upstreams up on 127.0.0.1: stable %d %d, canary %d %d%s", ports[0], ports[1], ports[2], ports[3], tlsNote)
	return nil
}

// clientFor returns the client of the benchmark's own requests to a
// contestant serving w.
func (b *bench) clientFor(w workload) *http.Client {
	if w.tls {
		return b.tlsClient
	}
	return client
}

// load runs w's load generator against the contestant on port for d.
func (b *bench) load(ctx context.Context, w workload, port int, d time.Duration) (wrkResult, error) {
	url := schemeURL(w.scheme(), port, w.path)
	if w.h2 {
		b.logs++
		return b.h2.run(ctx, b.ps, url, filepath.Join(b.dir, fmt.Sprintf("h2load-%d.log", b.logs)), d)
	}
	if w.resume {
		return b.tlsLoad.run(ctx, b.ps, url, d)
	}
	return b.wrk.run(ctx, b.ps, url, b.scripts[w.name], w.wrkArgs(), d)
}

// measure runs one contestant once on workload w: start, wait until
// ready, warm up (discarded), measure while reading CPU times and upstream
// counts around the run, check stickiness, stop. A failure is reported in
// the row's Missing, never as an error.
func (b *bench) measure(ctx context.Context, c contestant, w workload, round, slot int) row {
	r := row{Round: round, Slot: slot, Workload: w.name, Contestant: c.name, Split: c.tool != ""}
	fail := func(err error) row {
		r = row{Round: round, Slot: slot, Workload: w.name, Contestant: c.name, Split: r.Split, Missing: err.Error()}
		return r
	}
	port, p, err := b.launch(ctx, c, w, round)
	if err != nil {
		return fail(err)
	}
	if c.tool != "" {
		defer b.ps.stop(p)
	}
	if b.k.Warmup > 0 {
		if _, err := b.load(ctx, w, port, b.k.Warmup); err != nil {
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
	res, err := b.load(ctx, w, port, b.k.Duration)
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
		notes = append(notes, fmt.Sprintf("%s errors %d (non-2xx/3xx %d)", w.loadGen(), res.Errors, res.ErrStatus))
	}
	if res.Note != "" {
		notes = append(notes, res.Note)
	}
	if c.cookie != "" {
		note, err := stickyCheck(ctx, b.clientFor(w), schemeURL(w.scheme(), port, "/"), c.cookie, 10)
		if err != nil {
			note = err.Error()
		}
		notes = append(notes, note)
	}
	if w.cached() && c.tool != "" && r.upstreamPercent() > maxMissPercent {
		notes = append(notes, fmt.Sprintf("cache: %.1f%% of the requests reached an upstream after the warm-up", r.upstreamPercent()))
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
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "\n# dwara bench-compare, %s, took %s\n", start.UTC().Format("2006-01-02 15:04 UTC"), time.Since(start).Round(time.Second))
	fmt.Fprintln(w, hostLine(runtime.NumCPU(), cpuModel(cpuinfo), string(kernel), syscallCost(), load))
	fmt.Fprintf(w, "# %s\n", b.versions)
	secs := int(b.k.Duration / time.Second)
	for _, wl := range b.k.Workloads {
		gen := fmt.Sprintf("wrk -t%d -c%d -d%ds", b.k.Threads, b.k.Connections, secs)
		if wl.connClose {
			gen += " -H 'Connection: close'"
		}
		if wl.h2 {
			gen = fmt.Sprintf("h2load -t%d -c%d -m%d -D %d", b.h2.threads(), b.k.H2Clients, b.k.H2Streams, secs)
		}
		if wl.resume {
			gen = fmt.Sprintf("%s -t %d -c %d -d %ds -n 1", tlsLoadTool, b.k.Threads, b.k.Connections, secs)
		}
		fmt.Fprintf(w, "# workload %s: %s; %s %s\n", wl.name, wl.desc, gen, wl.scheme()+"://127.0.0.1:PORT"+wl.target())
	}
	fmt.Fprintf(w, "# each after a %s warm-up (discarded); canary %d%%; %d rounds, seed %d (SEED=%d repeats the orders)\n",
		b.k.Warmup, b.k.CanaryPercent, b.k.Rounds, b.k.Seed, b.k.Seed)
	for _, o := range orders {
		fmt.Fprintf(w, "#   %s\n", o)
	}
	fmt.Fprintln(w)
}

// toolVersions lists the versions of the tools in use.
func (b *bench) toolVersions(ctx context.Context) string {
	var vs []string
	for _, tool := range []string{"nginx", "haproxy", "wrk", "h2load"} {
		if p, ok := b.bins[tool]; ok {
			arg := "-v"
			if tool == "h2load" {
				arg = "--version"
			}
			vs = append(vs, tool+" "+toolVersion(ctx, b.ps, p, arg))
		}
	}
	vs = append(vs, "go "+runtime.Version())
	if slices.ContainsFunc(b.k.Contestants, func(n string) bool { return lookup(n).tool == "dwara" }) {
		vs = append(vs, "dwara "+buildRevision(b.k.DwaraBin))
	}
	if slices.Contains(b.k.Contestants, "dwara-base") {
		vs = append(vs, "dwara-base "+buildRevision(b.k.DwaraBaseBin))
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
