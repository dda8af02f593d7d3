// Command compare is dwara's side-by-side benchmark (`make bench-compare`):
// the same 95/5 stable/canary split done by nginx, HAProxy and dwara, plus
// the load generator straight at an upstream, and a sticky-session variant
// of HAProxy and dwara, all on 127.0.0.1, over a matrix of workloads (small
// GET, 16 KiB and 256 KiB answers, 4 KiB and 1 MiB POST bodies, a new
// connection per request, HTTP/1.1 over TLS, HTTP/2, a cacheable GET that
// every proxy answers from its cache).
//
// Four upstreams (bench/upstream: two stable, two canary) are started once.
// Each round runs, for each workload, every contestant in a fresh shuffled
// order: start it on a free port configured for the workload, wait until
// GET / answers 200, warm up (discarded), then measure (`wrk -t2 -c64
// -d10s`, or h2load for HTTP/2) while reading, from /proc, the CPU time of
// the contestant's process group and, from the upstreams' /stats, how many
// requests each pool served; stop it. The table gives, per workload and
// contestant, the min/median/max over rounds of each metric as a ratio to
// nginx on the same workload in the same round, plus absolute medians and
// the realised canary share. The raw rows go to a TSV file.
//
// Every process it starts (upstreams, proxies, wrk, apt-get) runs in a
// process group of its own and is stopped by that group's id when it is no
// longer needed, and in any case before compare exits, also on SIGINT or
// SIGTERM. Every step is bounded in time and the whole run has a deadline.
//
// Knobs are flags, each with an environment variable (see -h).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	k, err := parseKnobs(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		stop()
		return
	}
	if err == nil {
		err = run(ctx, k, os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare: %v\n", err)
		os.Exit(1)
	}
}

// knobs are the settings of one run.
type knobs struct {
	Rounds        int
	Duration      time.Duration // measured wrk run, whole seconds
	Warmup        time.Duration // discarded wrk run before it, whole seconds; 0 skips it
	Threads       int
	Connections   int
	CanaryPercent int
	DwaraBin      string
	DwaraBaseBin  string // contestant dwara-base's; "" unless it runs
	UpstreamBin   string
	TLSLoadBin    string
	Contestants   []string   // in table order
	Workloads     []workload // in table order
	H2Clients     int        // h2load -c
	H2Streams     int        // h2load -m
	Seed          uint64
	ResultsTSV    string
	Deadline      time.Duration // the whole run, from start to the last process stopped
}

// parseKnobs reads the knobs from the environment (getenv), then from the
// flags in args, which win.
func parseKnobs(args []string, getenv func(string) string, stderr io.Writer) (knobs, error) {
	k := knobs{
		Rounds:        5,
		Duration:      10 * time.Second,
		Warmup:        3 * time.Second,
		Threads:       2,
		Connections:   64,
		CanaryPercent: 5,
		DwaraBin:      "bin/dwara",
		UpstreamBin:   besideThis("bench-upstream"),
		TLSLoadBin:    besideThis(tlsLoadTool),
		H2Clients:     20,
		H2Streams:     10,
	}
	contestantList := strings.Join(contestantNames(false), ",")
	fs := flag.NewFlagSet("bench-compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: bench-compare [flags]   (make bench-compare)\n\n"+
			"Every flag can also be set with the environment variable named in brackets; a flag wins.\n\n")
		fs.PrintDefaults()
	}
	type knob struct{ flag, env string }
	var knobList []knob
	add := func(name, env string) string {
		knobList = append(knobList, knob{name, env})
		return "[" + env + "] "
	}
	fs.IntVar(&k.Rounds, "rounds", k.Rounds, add("rounds", "ROUNDS")+"rounds; each runs every workload once with every contestant, in a fresh shuffled order")
	fs.Var((*seconds)(&k.Duration), "duration", add("duration", "DURATION")+"measured run per workload, contestant and round, whole `seconds` (10 or 10s)")
	fs.Var((*seconds)(&k.Warmup), "warmup", add("warmup", "WARMUP")+"discarded warm-up before it, whole `seconds`; 0 skips it")
	fs.IntVar(&k.Threads, "threads", k.Threads, add("threads", "THREADS")+"wrk threads (-t); h2load's too, at most H2_CLIENTS")
	fs.IntVar(&k.Connections, "connections", k.Connections, add("connections", "CONNECTIONS")+"wrk connections (-c)")
	fs.IntVar(&k.CanaryPercent, "canary-percent", k.CanaryPercent, add("canary-percent", "CANARY_PERCENT")+"share of requests for the canary pool, 1..99")
	fs.StringVar(&k.DwaraBin, "dwara-bin", k.DwaraBin, add("dwara-bin", "DWARA_BIN")+"dwara binary")
	fs.StringVar(&k.DwaraBaseBin, "dwara-base-bin", "", add("dwara-base-bin", "DWARA_BASE_BIN")+"the dwara binary of contestant dwara-base (a build before a change), required with it")
	fs.StringVar(&k.UpstreamBin, "upstream-bin", k.UpstreamBin, add("upstream-bin", "UPSTREAM_BIN")+"bench/upstream binary")
	fs.StringVar(&k.TLSLoadBin, "tlsload-bin", k.TLSLoadBin, add("tlsload-bin", "TLSLOAD_BIN")+"bench/tlsload binary (workload tlsresume)")
	fs.String("contestants", contestantList, add("contestants", "CONTESTANTS")+"comma- or space-separated subset to run")
	fs.String("workloads", "get", add("workloads", "WORKLOADS")+"comma- or space-separated workloads, each run by every contestant: "+strings.Join(workloadNames(), " "))
	fs.IntVar(&k.H2Clients, "h2-clients", k.H2Clients, add("h2-clients", "H2_CLIENTS")+"workload h2: h2load connections (-c)")
	fs.IntVar(&k.H2Streams, "h2-streams", k.H2Streams, add("h2-streams", "H2_STREAMS")+"workload h2: h2load concurrent streams per connection (-m)")
	fs.Uint64Var(&k.Seed, "seed", k.Seed, add("seed", "SEED")+"seed of the round orders; 0 picks one at random")
	fs.StringVar(&k.ResultsTSV, "results-tsv", "", add("results-tsv", "RESULTS_TSV")+"file the raw rows are appended to (default $TMPDIR/dwara-bench-compare-TIME.tsv)")
	fs.Var((*seconds)(&k.Deadline), "deadline", add("deadline", "DEADLINE")+"deadline of the whole run, `seconds` (default: 10 min, plus the load's time and 30 s per measurement)")

	for _, kn := range knobList {
		if v := getenv(kn.env); v != "" {
			if err := fs.Set(kn.flag, v); err != nil {
				return knobs{}, fmt.Errorf("%s=%q: %w", kn.env, v, err)
			}
		}
	}
	if err := fs.Parse(args); err != nil {
		return knobs{}, err
	}
	if fs.NArg() > 0 {
		return knobs{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if k.Contestants, err = parseContestants(fs.Lookup("contestants").Value.String()); err != nil {
		return knobs{}, err
	}
	if k.Workloads, err = parseWorkloads(fs.Lookup("workloads").Value.String()); err != nil {
		return knobs{}, err
	}
	for k.Seed == 0 {
		k.Seed = rand.Uint64()
	}
	if k.ResultsTSV == "" {
		k.ResultsTSV = filepath.Join(os.TempDir(), "dwara-bench-compare-"+time.Now().Format("20060102-150405")+".tsv")
	}
	if k.Deadline == 0 {
		per := k.Warmup + k.Duration + 30*time.Second
		k.Deadline = 10*time.Minute + time.Duration(k.Rounds*len(k.Contestants)*len(k.Workloads))*per
	}
	return k, k.validate()
}

// validate checks the ranges of the knobs.
func (k knobs) validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(k.Rounds >= 1 && k.Rounds <= 100, "ROUNDS must be 1..100, got %d", k.Rounds)
	check(k.Duration >= time.Second && k.Duration <= 5*time.Minute, "DURATION must be 1..300 seconds, got %s", k.Duration)
	check(k.Warmup >= 0 && k.Warmup <= time.Minute, "WARMUP must be 0..60 seconds, got %s", k.Warmup)
	check(k.Threads >= 1 && k.Threads <= 64, "THREADS must be 1..64, got %d", k.Threads)
	check(k.Connections >= k.Threads && k.Connections <= 4096, "CONNECTIONS must be THREADS..4096, got %d", k.Connections)
	check(k.CanaryPercent >= 1 && k.CanaryPercent <= 99, "CANARY_PERCENT must be 1..99, got %d", k.CanaryPercent)
	check(k.H2Clients >= 1 && k.H2Clients <= 1000, "H2_CLIENTS must be 1..1000, got %d", k.H2Clients)
	check(k.H2Streams >= 1 && k.H2Streams <= 1000, "H2_STREAMS must be 1..1000, got %d", k.H2Streams)
	check(k.Deadline >= time.Minute, "DEADLINE must be at least 60 seconds, got %s", k.Deadline)
	check(!slices.Contains(k.Contestants, "dwara-base") || k.DwaraBaseBin != "", "contestant dwara-base needs DWARA_BASE_BIN, the dwara binary to compare with")
	return errors.Join(errs...)
}

// parseContestants splits a comma- or space-separated list, checks every
// name and returns them in table order, without duplicates.
func parseContestants(s string) ([]string, error) {
	want := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	if len(want) == 0 {
		return nil, errors.New("CONTESTANTS is empty")
	}
	all := contestantNames(true)
	for _, w := range want {
		if !slices.Contains(all, w) {
			return nil, fmt.Errorf("CONTESTANTS: unknown contestant %q; known: %s", w, strings.Join(all, " "))
		}
	}
	return slices.DeleteFunc(all, func(n string) bool { return !slices.Contains(want, n) }), nil
}

// besideThis is the program name next to this program's executable
// (where `make bench-compare` builds them all), else bin/name.
func besideThis(name string) string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), name)
		if checkExecutable(p) == nil {
			return p
		}
	}
	return filepath.Join("bin", name)
}

// seconds is a flag.Value for a whole number of seconds, written as "10"
// or as a Go duration ("10s", "1m").
type seconds time.Duration

func (s *seconds) String() string {
	if s == nil {
		return "0s"
	}
	return time.Duration(*s).String()
}

func (s *seconds) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return fmt.Errorf("%q is neither seconds nor a duration", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d%time.Second != 0 {
		return fmt.Errorf("%q is not a whole number of seconds", v)
	}
	*s = seconds(d)
	return nil
}
