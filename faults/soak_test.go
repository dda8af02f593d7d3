package faults

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/cookiejar"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/node"
)

// soakEnv sets the soak's duration (a Go duration); unset means
// defaultSoak. make test-faults passes it on (5m unless set; CI sets 90s).
const soakEnv = "DWARA_SOAK"

const (
	defaultSoak = 5 * time.Minute
	soakWarmUp  = 5 * time.Second // load before the start figures
	flipEvery   = 2 * time.Second
)

// The soak's bounds, end against start (both under the same load, after a
// GC): goroutines within +50, RSS within 1.5x + 32 MiB.
const (
	goroutineSlack = 50
	rssFactor      = 1.5
	rssSlack       = 32 << 20
)

func soakDuration(t *testing.T) time.Duration {
	t.Helper()
	return envDuration(t, soakEnv, defaultSoak, 10*time.Second)
}

// envDuration reads the Go duration in the environment variable name: def
// when unset, else from least to an hour.
func envDuration(t *testing.T, name string, def, least time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < least || d > time.Hour {
		t.Fatalf("%s=%q: want a duration from %v to 1h", name, v, least)
	}
	return d
}

// TestSoak sends mixed traffic through serve's proxy for DWARA_SOAK: GETs
// of new sessions (no cookie), GETs of sticky sessions (their cookie kept),
// and POSTs with bodies of 0-64 KiB checked whole at the upstream, while
// the API flips the split every 2 s. No request and no flip may fail, and
// at the end the process's goroutines and RSS (after a GC) must be within
// +50 and 1.5x + 32 MiB of the start, both measured under the load.
//
// It does not run in parallel: it measures the whole test process, so the
// other tests (all parallel) run after it.
func TestSoak(t *testing.T) {
	need(t)
	d := soakDuration(t)
	a := startUpstream(t, "soak-a", 2, 0)
	b := startUpstream(t, "soak-b", 2, 0)
	url := dbtest.New(t)
	srv := startServe(t, "serve", node.ServeConfig{DatabaseURL: url})
	g := publish(t, srv.Admin, splitUpstreams(a, b, 90, 10).Sticky("dwara_affinity", 3600).JSON(), "faults: soak")
	srv.waitApplied(t, g.ID, wait)

	// Clients 0-2: new sessions; 3-5: sticky sessions; 6-7: POSTs.
	jars := make([]http.CookieJar, 8)
	for c := 3; c <= 5; c++ {
		jars[c], _ = cookiejar.New(nil)
	}
	base := "http://" + srv.Proxy + "/soak"
	traffic := startLoad(t, 8, d+time.Minute, func(c, i int) (string, error) {
		switch {
		case c <= 2:
			return soakGet(nil, base, false)
		case c <= 5:
			return soakGet(jars[c], base, i > 0)
		default:
			body := make([]byte, rand.IntN(64<<10+1))
			for j := range body {
				body[j] = byte(rand.Uint32())
			}
			return soakPost(base, body)
		}
	})

	// The flips: one every 2 s until the load stops.
	var flipMu sync.Mutex
	flips, flipFailures := 0, []string{}
	stopFlips := make(chan struct{})
	flipsDone := make(chan struct{})
	go func() {
		defer close(flipsDone)
		tick := time.NewTicker(flipEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopFlips:
				return
			case <-tick.C:
			}
			ans := callAPI(http.MethodPost, "http://"+srv.Admin+"/api/v1/services/web/flip", map[string]any{"message": "faults: soak flip"})
			flipMu.Lock()
			if ans.err != nil || ans.status != http.StatusCreated {
				flipFailures = append(flipFailures, ans.String())
			} else {
				flips++
			}
			flipMu.Unlock()
		}
	}()
	stopAll := sync.OnceFunc(func() {
		close(stopFlips)
		<-flipsDone
		traffic.stop()
	})
	t.Cleanup(stopAll)

	began := time.Now()
	time.Sleep(soakWarmUp)
	startFig := measure(t)
	okStart, _ := traffic.snapshot()
	t.Logf("soak start (after %v of load): %s; %d requests so far", soakWarmUp, startFig, okStart)
	deadline := began.Add(d)
	report := time.NewTicker(30 * time.Second)
	defer report.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-report.C:
			ok, failed := traffic.snapshot()
			t.Logf("soak +%v: %s; %d requests, %d failed", time.Since(began).Round(time.Second), measure(t), ok, failed)
		case <-time.After(time.Until(deadline)):
		}
	}
	endFig := measure(t) // still under the load, as at the start
	stopAll()
	idle := measure(t)
	t.Logf("soak end (after %v): %s; with the load stopped: %s", time.Since(began).Round(time.Second), endFig, idle)
	traffic.report(t, "soak traffic (clients 0-2 new sessions, 3-5 sticky, 6-7 POSTs)")
	flipMu.Lock()
	t.Logf("flips: %d published, %d failed", flips, len(flipFailures))
	for i, f := range flipFailures {
		if i < 5 {
			t.Errorf("flip failed: %s", f)
		}
	}
	if len(flipFailures) > 0 {
		t.Errorf("%d of %d flips failed, want 0", len(flipFailures), flips+len(flipFailures))
	}
	flipMu.Unlock()

	if endFig.goroutines > startFig.goroutines+goroutineSlack {
		t.Errorf("goroutines grew from %d to %d (bound +%d)", startFig.goroutines, endFig.goroutines, goroutineSlack)
	}
	if limit := int64(float64(startFig.rss)*rssFactor) + rssSlack; endFig.rss > limit {
		t.Errorf("RSS grew from %.1f MiB to %.1f MiB (bound %.1f MiB: %.1fx + %d MiB)", mib(startFig.rss), mib(endFig.rss), mib(limit), rssFactor, rssSlack>>20)
	}
	t.Logf("bounds: goroutines %d -> %d (at most %d), RSS %.1f -> %.1f MiB (at most %.1f MiB)",
		startFig.goroutines, endFig.goroutines, startFig.goroutines+goroutineSlack,
		mib(startFig.rss), mib(endFig.rss), mib(int64(float64(startFig.rss)*rssFactor)+rssSlack))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// soakGet sends one GET. With a jar it is a sticky session: every request
// after its first carries the cookie and must not get a new one.
func soakGet(jar http.CookieJar, url string, returning bool) (string, error) {
	c := loadClient
	if jar != nil {
		c = &http.Client{Transport: loadClient.Transport, Timeout: loadClient.Timeout, Jar: jar}
	}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return "", fmt.Errorf("GET: status %d, body cut: %w", resp.StatusCode, err)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("GET: status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	case jar == nil && resp.Header.Get("Set-Cookie") == "":
		return "", fmt.Errorf("GET of a new session: no Set-Cookie")
	case returning && resp.Header.Get("Set-Cookie") != "":
		return "", fmt.Errorf("GET of a returning session got a new cookie: %s", resp.Header.Get("Set-Cookie"))
	}
	if err := checkEcho(body, nil); err != nil {
		return "", err
	}
	if jar != nil {
		return "GET sticky", nil
	}
	return "GET new session", nil
}

// soakPost sends one POST with body and checks the upstream got it whole.
func soakPost(url string, body []byte) (string, error) {
	resp, err := loadClient.Post(url, "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	answer, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return "", fmt.Errorf("POST of %d bytes: status %d, body cut: %w", len(body), resp.StatusCode, err)
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("POST of %d bytes: status %d: %s", len(body), resp.StatusCode, bytes.TrimSpace(answer))
	}
	if err := checkEcho(answer, body); err != nil {
		return "", fmt.Errorf("POST of %d bytes: %w", len(body), err)
	}
	return "POST", nil
}
