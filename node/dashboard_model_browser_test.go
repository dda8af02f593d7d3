package node

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/client/cli"
	"github.com/dwara/dwara/internal/fakeai"
)

// TestDashboardModelCanary drives the canary panel of a model group in
// headless Chromium against dwara serve and a replica (startModelFleet):
// after 100 streamed chats, the canary model sending its first token
// after 120 ms (and failing none, so the controller holds it), the card
// of llm/chat carries the model badge and, beside each version's requests and error rate, its TTFT p99:
// the figures GET /api/v1/canary answers, the canary's at least 120 ms.
// `dwara canary` prints the same TTFT after each version's figures.
// Nothing is loaded from elsewhere and no script fails.
func TestDashboardModelCanary(t *testing.T) {
	t.Parallel()
	browser, shots := dashboardBrowser(t)

	const ttft = 120 * time.Millisecond
	f := startModelFleet(t, fakeai.Options{Name: "cand", TTFT: ttft, Seed: 7, Events: 2}, errorRateAnalysis)
	for range 100 {
		sendChat(t, f.replica.Proxy, f.next())
	}
	sent := 0.0 // every chat the replica answered: none is a 429
	for k, v := range scrape(t, metricsAddr(f.replica), "dwara_model_requests_total") {
		if strings.Contains(k, "alias=chat") {
			sent += v
		}
	}
	var g apiv1.CanaryGroup
	waitUntil(t, "the fleet's window of llm/chat holding every chat sent", func() bool {
		var list apiv1.CanaryList
		if resp := call(t, http.MethodGet, "http://"+f.serve.Admin+"/api/v1/canary", nil, &list); resp.StatusCode != http.StatusOK || len(list.Items) != 1 {
			t.Fatalf("GET /api/v1/canary: status %d, %d groups; want 200 and one", resp.StatusCode, len(list.Items))
		}
		g = list.Items[0]
		return float64(g.BaselineWindow.Requests+g.CanaryWindow.Requests) == sent
	}, ticks(t, canaryInterval))
	if g.Kind != apiv1.CanaryKindModel || g.CanaryWindow.TTFTP99 < ttft.Seconds() || g.BaselineWindow.TTFTP99 <= 0 {
		t.Fatalf("GET /api/v1/canary = %+v, want group %s of kind model with both TTFTs, the canary's at least %v", g, modelGroup, ttft)
	}

	dash := dashboardOrigin(t, f.serve.Admin)
	p, seen := openTab(t, browser, shots, dash)
	card := fmt.Sprintf(`document.querySelector('[data-canary=%q]')`, modelGroup)
	p.waitFor("llm/chat's figures with a TTFT", card+` && `+card+`.querySelector('[data-version="canary"] [data-ttft]')`)
	if !eval[bool](p, card+`.querySelector('.card-head [data-kind="model"]') !== null`) {
		t.Error("the card of llm/chat has no model badge")
	}
	if got := eval[string](p, card+`.querySelector('table.figures thead').textContent`); !strings.Contains(got, "TTFT p99") {
		t.Errorf("the figures' heading reads %q, want a TTFT p99 column", got)
	}
	for version, w := range map[string]apiv1.CanaryFigures{"baseline": g.BaselineWindow, "canary": g.CanaryWindow} {
		row := card + `.querySelector('[data-version="` + version + `"]')`
		if got := eval[float64](p, `Number(`+row+`.querySelector('[data-ttft]').dataset.ttft)`); math.Abs(got-w.TTFTP99) > 1e-9 {
			t.Errorf("%s: the page shows a TTFT p99 of %v s, the API %v s", version, got, w.TTFTP99)
		}
		if got := eval[float64](p, `Number(`+row+`.querySelector('[data-requests]').dataset.requests)`); got != float64(w.Requests) {
			t.Errorf("%s: the page shows %v requests, the API %d", version, got, w.Requests)
		}
		if got, want := eval[string](p, row+`.querySelector('[data-ttft]').textContent`), latencyText(w.TTFTP99); got != want {
			t.Errorf("%s: the TTFT p99 cell reads %q, want %q (the API's %v s)", version, got, want, w.TTFTP99)
		}
	}
	p.screenshot("model-canary", true)
	seen.Check(t, strings.TrimPrefix(dash, "http://"), append(dashboardAssets, "/api/v1/canary")...)

	var out, errs bytes.Buffer
	if code := cli.Run(context.Background(), []string{"canary", "--api", dash}, cli.IO{Out: &out, Err: &errs, Getenv: func(string) string { return "" }}); code != 0 {
		t.Fatalf("dwara canary: exit %d, %s", code, errs.String())
	}
	row := regexp.MustCompile(`(?m)^llm/chat \(model\)\s+running\s+90/10\s+60s\s+\d+ req, 0\.00% err, p99 \S+, ttft p99 \S+\s+\d+ req, 0\.00% err, p99 \S+, ttft p99 (\d+\.\d)ms$`)
	m := row.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("dwara canary printed\n%s\nwant a row of llm/chat (model) with each version's ttft p99", out.String())
	}
	if want := fmt.Sprintf("%.1f", g.CanaryWindow.TTFTP99*1000); m[1] != want {
		t.Errorf("dwara canary shows the canary's ttft p99 %sms, the API %sms", m[1], want)
	}
}

// latencyText is how the dashboard writes a latency of s seconds
// (web/ui/app.js, latency): whole microseconds under a millisecond,
// milliseconds to a tenth under a second, seconds to a hundredth above.
func latencyText(s float64) string {
	switch {
	case s < 0.001:
		return fmt.Sprintf("%d µs", int(math.Round(s*1e6)))
	case s < 1:
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}
