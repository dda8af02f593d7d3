package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// wrkReport is the Lua hook that makes wrk print one machine-readable line
// after its run: latencies are wrk's own histogram, in microseconds. Every
// workload's script ends with it (workload.wrkScript).
const wrkReport = `-- Written by bench/compare: one machine-readable summary line.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRKRESULT requests=%d duration_us=%d rps=%.1f p50_us=%.0f p99_us=%.0f max_us=%.0f errors=%d err_status=%d\n",
    summary.requests, summary.duration, summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), latency.max,
    e.connect + e.read + e.write + e.status + e.timeout, e.status))
end
`

// wrkResult is the summary line printed by wrkReport; h2load's output is
// turned into one too (parseH2Load).
type wrkResult struct {
	Requests int64
	Duration time.Duration
	RPS      float64
	P50, P99 time.Duration
	Max      time.Duration
	// Errors counts socket errors, timeouts and non-2xx/3xx answers;
	// ErrStatus only the answers.
	Errors, ErrStatus int64
	// Note is what the load generator has to say about the run, if
	// anything (bench-tlsload: sessions not resumed).
	Note string
}

// parseWRK finds the WRKRESULT line in wrk's output and parses it. Every
// field is required.
func parseWRK(out []byte) (wrkResult, error) {
	kv, err := wrkFields(out)
	if err != nil {
		return wrkResult{}, err
	}
	return kv.result(), nil
}

// wrkLine is the fields of a WRKRESULT line, by name.
type wrkLine map[string]float64

// wrkFields finds the last WRKRESULT line in out and reads its key=value
// fields: wrk's, which are all required, and the extra ones named, which
// are required too.
func wrkFields(out []byte, extra ...string) (wrkLine, error) {
	var line string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "WRKRESULT "); ok {
			line = rest
		}
	}
	if line == "" {
		return nil, fmt.Errorf("parse wrk output: no WRKRESULT line in %q", lastLines(out, 5))
	}
	kv := wrkLine{}
	for field := range strings.FieldsSeq(line) {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return nil, fmt.Errorf("parse wrk output: field %q is not key=value", field)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, fmt.Errorf("parse wrk output: %s: %w", k, err)
		}
		kv[k] = f
	}
	for _, k := range append([]string{"requests", "duration_us", "rps", "p50_us", "p99_us", "max_us", "errors", "err_status"}, extra...) {
		if _, ok := kv[k]; !ok {
			return nil, fmt.Errorf("parse wrk output: no %s in %q", k, line)
		}
	}
	return kv, nil
}

// result is wrk's figures of the line.
func (kv wrkLine) result() wrkResult {
	us := func(k string) time.Duration { return time.Duration(kv[k] * float64(time.Microsecond)) }
	return wrkResult{
		Requests:  int64(kv["requests"]),
		Duration:  us("duration_us"),
		RPS:       kv["rps"],
		P50:       us("p50_us"),
		P99:       us("p99_us"),
		Max:       us("max_us"),
		Errors:    int64(kv["errors"]),
		ErrStatus: int64(kv["err_status"]),
	}
}

// wrkLoad is how wrk is run: the same threads and connections for every
// workload.
type wrkLoad struct {
	Bin         string
	Threads     int
	Connections int
}

// wrkSlack is how much longer than its -d a load generator may take before
// it is stopped.
const wrkSlack = 20 * time.Second

// run loads url (on 127.0.0.1) with wrk for d (whole seconds), running the
// Lua script at path script with the extra arguments, and parses the
// result. The run is bounded by d+wrkSlack and by ctx.
func (w wrkLoad) run(ctx context.Context, ps *procs, url, script string, extra []string, d time.Duration) (wrkResult, error) {
	secs := int(d / time.Second)
	argv := []string{w.Bin, "-t" + strconv.Itoa(w.Threads), "-c" + strconv.Itoa(w.Connections), "-d" + strconv.Itoa(secs) + "s",
		"--timeout", "5s", "-s", script}
	argv = append(append(argv, extra...), url)
	out, err := ps.run(ctx, d+wrkSlack, "wrk", nil, argv...)
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w%s", err, lastLines(out, 5))
	}
	return parseWRK(out)
}
