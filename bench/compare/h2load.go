package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// h2Load is how h2load is run for the h2 workload: Clients connections,
// each with up to Streams concurrent streams, over Threads threads.
type h2Load struct {
	Bin     string
	Threads int
	Clients int
	Streams int
}

// threads is h2load's -t: it may not exceed -c.
func (h h2Load) threads() int { return min(h.Threads, h.Clients) }

// run loads url (https on 127.0.0.1) with h2load for d (whole seconds),
// writing its per-request log to logFile, and turns what it printed and
// logged into a wrkResult. A run that did not negotiate h2 is an error.
// The run is bounded by d+wrkSlack and by ctx.
func (h h2Load) run(ctx context.Context, ps *procs, url, logFile string, d time.Duration) (wrkResult, error) {
	secs := int(d / time.Second)
	out, err := ps.run(ctx, d+wrkSlack, "h2load", nil, h.Bin,
		"-t"+strconv.Itoa(h.threads()), "-c"+strconv.Itoa(h.Clients), "-m"+strconv.Itoa(h.Streams),
		"-D", strconv.Itoa(secs), "--log-file="+logFile, url)
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w%s", err, lastLines(out, 5))
	}
	f, err := os.Open(logFile)
	if err != nil {
		return wrkResult{}, fmt.Errorf("h2load log: %w", err)
	}
	defer f.Close()
	defer os.Remove(logFile) // a few MB per run; nothing reads it again
	return parseH2Load(out, f)
}

var (
	h2Finished = regexp.MustCompile(`(?m)^finished in ([0-9.]+)(s|ms), ([0-9.]+) req/s`)
	h2Requests = regexp.MustCompile(`(?m)^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2Protocol = regexp.MustCompile(`(?m)^Application protocol: (\S+)`)
)

// parseH2Load reads h2load's summary (out) and its --log-file (one line
// per request: start time in µs, status, µs until the end of the
// response, tab-separated): req/s and the counts from the summary, p50,
// p99 and the maximum from the log (h2load prints no percentiles). Errors
// are the failed requests (non-2xx/3xx answers included) and timeouts;
// ErrStatus the failed ones that were answered.
func parseH2Load(out []byte, log io.Reader) (wrkResult, error) {
	proto := h2Protocol.FindSubmatch(out)
	if proto == nil {
		return wrkResult{}, fmt.Errorf("parse h2load output: no application protocol negotiated%s", lastLines(out, 5))
	}
	if p := string(proto[1]); p != "h2" {
		return wrkResult{}, fmt.Errorf("parse h2load output: negotiated %q, not h2", p)
	}
	fin := h2Finished.FindSubmatch(out)
	req := h2Requests.FindSubmatch(out)
	if fin == nil || req == nil {
		return wrkResult{}, fmt.Errorf("parse h2load output: no finished/requests lines%s", lastLines(out, 5))
	}
	dur, _ := strconv.ParseFloat(string(fin[1]), 64)
	if string(fin[2]) == "ms" {
		dur /= 1000
	}
	rps, _ := strconv.ParseFloat(string(fin[3]), 64)
	n := func(i int) int64 { v, _ := strconv.ParseInt(string(req[i]), 10, 64); return v }
	done, failed, errored, timeout := n(3), n(5), n(6), n(7)

	var lat []int64
	sc := bufio.NewScanner(log)
	for sc.Scan() {
		f := bytes.Split(sc.Bytes(), []byte("\t"))
		if len(f) < 3 {
			return wrkResult{}, fmt.Errorf("parse h2load log: line %d has %d fields, want 3", len(lat)+1, len(f))
		}
		us, err := strconv.ParseInt(string(bytes.TrimSpace(f[2])), 10, 64)
		if err != nil {
			return wrkResult{}, fmt.Errorf("parse h2load log: line %d: %w", len(lat)+1, err)
		}
		lat = append(lat, us)
	}
	if err := sc.Err(); err != nil {
		return wrkResult{}, fmt.Errorf("parse h2load log: %w", err)
	}
	if len(lat) == 0 {
		return wrkResult{}, fmt.Errorf("parse h2load log: no requests logged (%d done)", done)
	}
	slices.Sort(lat)
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return wrkResult{
		Requests:  done,
		Duration:  time.Duration(dur * float64(time.Second)),
		RPS:       rps,
		P50:       us(nearestRank(lat, 0.50)),
		P99:       us(nearestRank(lat, 0.99)),
		Max:       us(lat[len(lat)-1]),
		Errors:    failed + timeout,
		ErrStatus: failed - errored,
	}, nil
}

// nearestRank is the p-quantile (0 < p <= 1) of the sorted, non-empty xs:
// the smallest value with at least p of the sample at or below it.
func nearestRank(xs []int64, p float64) int64 {
	i := int(float64(len(xs))*p+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
