package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dwara/dwara/gateway/config"
)

// maxProbeCount bounds --count.
const maxProbeCount = 10_000

// setupProbe is `dwara probe SERVICE [--branch NAME] [--count N] [--proxy
// URL] [--path P]`: it reads the active generation for SERVICE's override
// header, base path and targets, sends N forced requests per branch
// through the gateway at --proxy, and prints the answers' statuses and
// latencies per branch.
func setupProbe(fs *flag.FlagSet) func(context.Context, *clientCall, []string) error {
	branch := fs.String("branch", "", "probe only this target (an upstream `NAME` of the service's split); default: every target")
	count := fs.Int("count", 10, "requests per branch, `N` in 1..10000")
	proxyURL := fs.String("proxy", "http://127.0.0.1:8080", "base `URL` of the gateway to probe through")
	path := fs.String("path", "", "request `PATH` (default: the service's base path)")
	return func(ctx context.Context, cc *clientCall, args []string) error {
		if len(args) != 1 {
			return usagef("probe needs exactly one SERVICE")
		}
		if *count < 1 || *count > maxProbeCount {
			return usagef("--count must be from 1 to %d, not %d", maxProbeCount, *count)
		}
		service := args[0]
		g, err := cc.c.Current(ctx)
		if err != nil {
			return err
		}
		spec, err := config.Parse(g.Spec)
		if err != nil {
			return fmt.Errorf("the active generation %d does not decode: %w", g.ID, err)
		}
		svc, _ := spec.Service(service)
		if svc == nil {
			msg := fmt.Sprintf("generation %d has no service %q", g.ID, service)
			if near := spec.NearestService(service); near != "" {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			return errors.New(msg)
		}
		if svc.Override == nil {
			return fmt.Errorf("service %q declares no override header, so a request cannot choose its branch; add override: {header: X-Dwara-Branch} to it", service)
		}
		var branches []string
		for _, t := range svc.Targets() {
			branches = append(branches, t.Upstream)
		}
		if *branch != "" {
			if !slices.Contains(branches, *branch) {
				return usagef("%q is not a target of %s; its targets: %s", *branch, service, strings.Join(branches, ", "))
			}
			branches = []string{*branch}
		}
		target := *path
		if target == "" {
			target = svc.BasePath
		}
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		hc := &http.Client{Timeout: 10 * time.Second}
		report := probeReport{Generation: g.ID, Service: service, Header: svc.Override.Header, URL: *proxyURL + target}
		failed := false
		for _, b := range branches {
			r := probeBranch(ctx, hc, strings.TrimSuffix(*proxyURL, "/")+target, svc.Host, svc.Override.Header, b, *count)
			report.Branches = append(report.Branches, probeBranchReport{
				Branch: b, Sent: *count, Statuses: r.codes, Errors: r.errors,
				P50: r.quantile(0.5), P99: r.quantile(0.99), Max: r.quantile(1),
			})
			failed = failed || r.errors > 0
		}
		if cc.output != outputText {
			if cc.answer, err = json.Marshal(report); err != nil {
				return err
			}
			cc.printAnswer()
		} else {
			tw := tabwriter.NewWriter(cc.io.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "BRANCH\tSENT\tSTATUSES\tP50\tP99\tMAX\n")
			for _, b := range report.Branches {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", b.Branch, b.Sent, statuses(b.Statuses), b.P50, b.P99, b.Max)
			}
			tw.Flush()
			fmt.Fprintf(cc.io.Out, "generation %d, header %s, %s\n", g.ID, svc.Override.Header, report.URL)
		}
		if failed {
			return fmt.Errorf("some probes got no answer (see STATUSES)")
		}
		return nil
	}
}

// probeResult is what the probes of one branch got.
type probeResult struct {
	codes     map[string]int
	latencies []time.Duration
	errors    int
}

func probeBranch(ctx context.Context, hc *http.Client, url, host, header, branch string, n int) probeResult {
	r := probeResult{codes: map[string]int{}}
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			r.codes["error"]++
			r.errors++
			continue
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set(header, branch)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			r.codes["error"]++
			r.errors++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.latencies = append(r.latencies, time.Since(start))
		r.codes[fmt.Sprint(resp.StatusCode)]++
	}
	return r
}

// probeReport is what probe prints with -o json or yaml.
type probeReport struct {
	Generation int64               `json:"generation"`
	Service    string              `json:"service"`
	Header     string              `json:"header"`
	URL        string              `json:"url"`
	Branches   []probeBranchReport `json:"branches"`
}

// probeBranchReport is one branch's row: the counts per status ("error"
// for no answer) and the latency quantiles.
type probeBranchReport struct {
	Branch   string         `json:"branch"`
	Sent     int            `json:"sent"`
	Statuses map[string]int `json:"statuses"`
	Errors   int            `json:"errors"`
	P50      string         `json:"p50"`
	P99      string         `json:"p99"`
	Max      string         `json:"max"`
}

// statuses formats counts per status, e.g. "200x9 502x1".
func statuses(codes map[string]int) string {
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%sx%d", k, codes[k]))
	}
	return strings.Join(parts, " ")
}

// quantile is the q-quantile of the latencies (nearest rank), "-" with none.
func (r probeResult) quantile(q float64) string {
	if len(r.latencies) == 0 {
		return "-"
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	i := int(q*float64(len(l))+0.999999) - 1
	i = min(max(i, 0), len(l)-1)
	return l[i].Round(10 * time.Microsecond).String()
}
