package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/affinity"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/internal/testnet"
	"github.com/dwara/dwara/internal/teststat"
)

func startPool(t testing.TB, name string, n int) *demo.Pool {
	t.Helper()
	p, err := demo.StartPool(name, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// gateway is a Proxy on a real loopback listener.
type gateway struct {
	*Proxy
	URL string
	reg *prometheus.Registry
}

// startGateway starts a gateway served on front (serveFront) with its own
// metrics registry.
func startGateway(t testing.TB, front string) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := New(Options{Metrics: reg})
	return &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
}

func mustParse(t testing.TB, yaml string) *config.Spec {
	t.Helper()
	s, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("parse spec: %v\n%s", err, yaml)
	}
	return s
}

func (g *gateway) apply(t testing.TB, gen int64, yaml string) {
	t.Helper()
	if err := g.Apply(mustParse(t, yaml), gen); err != nil {
		t.Fatalf("apply generation %d: %v", gen, err)
	}
}

// sample is one series of a gathered metric: its labels and its value (a
// counter's or a gauge's; 0 for other kinds).
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// samples gathers g's registry and returns every series of the metrics
// named (of every metric when none is named).
func (g *gateway) samples(t testing.TB, names ...string) []sample {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, mf := range mfs {
		if len(names) > 0 && !slices.Contains(names, mf.GetName()) {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := sample{name: mf.GetName(), labels: map[string]string{}, value: m.GetCounter().GetValue() + m.GetGauge().GetValue()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// endpoints formats a pool's addresses as a YAML flow list.
func endpoints(p *demo.Pool) string {
	return `["` + strings.Join(p.Addrs, `", "`) + `"]`
}

var client = &http.Client{
	Transport: &http.Transport{MaxIdleConnsPerHost: 64},
	Timeout:   10 * time.Second,
}

// get sends one request and returns the response with its body read.
func get(t testing.TB, c *http.Client, url string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

func TestSplitRatiosEndToEnd(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		tests := []struct {
			name    string
			weights []int
			keys    int
		}{
			{"95/5", []int{95, 5}, 4000},
			{"50/50", []int{50, 50}, 3000},
			{"1/99", []int{1, 99}, 4000},
			{"4-way", []int{40, 30, 20, 10}, 4000},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var pools []*demo.Pool
				index := map[string]int{}
				for i := range tt.weights {
					p := startPool(t, fmt.Sprintf("pool-%d", i), 2)
					index[p.Name] = i
					pools = append(pools, p)
				}
				g := startGateway(t, front)
				g.apply(t, 1, spectest.SplitOver(pools, tt.weights...).YAML())
				counts := make([]int, len(tt.weights))
				// Request ids the gateway takes as they are (no '/': see
				// apiv1.ValidRequestID), so the keys, and the counts, are the
				// same in every run.
				name := strings.ReplaceAll(tt.name, "/", "-")
				for k := 0; k < tt.keys; k++ {
					id := fmt.Sprintf("req-%s-%d", name, k)
					resp, _ := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": id})
					if resp.StatusCode != 200 {
						t.Fatalf("status %d", resp.StatusCode)
					}
					if got := resp.Header.Get("X-Request-Id"); got != id {
						t.Fatalf("request id %q answered as %q: the key was not the one sent", id, got)
					}
					counts[index[resp.Header.Get("X-Pool")]]++
				}
				df := len(tt.weights) - 1
				if chi := teststat.ChiSquare(counts, tt.weights); chi > teststat.Critical001[df] {
					t.Errorf("counts %v for weights %v: chi-square %.2f > %.3f (p = 0.001)", counts, tt.weights, chi, teststat.Critical001[df])
				}
				// The pick metric counted the same.
				for i, p := range pools {
					got := testutil.ToFloat64(g.m.picks.WithLabelValues("web", p.Name))
					if int(got) != counts[i] {
						t.Errorf("dwara_split_picks_total{upstream=%q} = %v, want %d", p.Name, got, counts[i])
					}
				}
			})
		}
	})
}

var cookieRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func TestStickySessionsEndToEnd(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		stable := startPool(t, "stable", 3)
		canary := startPool(t, "canary", 3)
		g := startGateway(t, front)
		g.apply(t, 1, fmt.Sprintf(`
upstreams:
  - {name: stable, endpoints: %s}
  - {name: canary, balancer: ip_hash, endpoints: %s}
services:
  - name: web
    split:
      targets: [{upstream: stable, weight: 70}, {upstream: canary, weight: 30}]
    sticky: {cookie: dwara_affinity, ttl_s: 600}
`, endpoints(stable), endpoints(canary)))

		const clients, perClient = 500, 10
		var (
			wg        sync.WaitGroup
			mu        sync.Mutex
			failures  []string
			pools     = map[string]int{}
			endpoints = map[string]bool{} // canary endpoints seen across sessions
		)
		fail := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			if len(failures) < 10 {
				failures = append(failures, fmt.Sprintf(format, args...))
			}
		}
		sem := make(chan struct{}, 16)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(c int) {
				defer wg.Done()
				defer func() { <-sem }()
				jar, _ := cookiejar.New(nil)
				hc := &http.Client{Jar: jar, Transport: client.Transport, Timeout: 10 * time.Second}
				var pool, endpoint string
				for i := 0; i < perClient; i++ {
					resp, err := hc.Get(g.URL + "/page")
					if err != nil {
						fail("client %d request %d: %v", c, i, err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					setCookie := resp.Header.Values("Set-Cookie")
					if i == 0 {
						if len(setCookie) != 1 {
							fail("client %d: first response has %d Set-Cookie", c, len(setCookie))
							return
						}
						ck := (&http.Response{Header: http.Header{"Set-Cookie": setCookie}}).Cookies()[0]
						if ck.Name != "dwara_affinity" || !cookieRE.MatchString(ck.Value) || ck.MaxAge != 600 || !ck.HttpOnly || ck.Path != "/" || ck.SameSite != http.SameSiteLaxMode {
							fail("client %d: bad cookie %q", c, setCookie[0])
						}
						pool, endpoint = resp.Header.Get("X-Pool"), resp.Header.Get("X-Endpoint")
						continue
					}
					if len(setCookie) != 0 {
						fail("client %d request %d: Set-Cookie again: %q", c, i, setCookie)
					}
					if got := resp.Header.Get("X-Pool"); got != pool {
						fail("client %d request %d: served by %s, first by %s", c, i, got, pool)
					}
					if pool == "canary" && resp.Header.Get("X-Endpoint") != endpoint {
						fail("client %d request %d: ip_hash endpoint %s, first %s", c, i, resp.Header.Get("X-Endpoint"), endpoint)
					}
				}
				mu.Lock()
				pools[pool]++
				if pool == "canary" {
					endpoints[endpoint] = true
				}
				mu.Unlock()
			}(c)
		}
		wg.Wait()
		for _, f := range failures {
			t.Error(f)
		}
		if chi := teststat.ChiSquare([]int{pools["stable"], pools["canary"]}, []int{70, 30}); chi > teststat.Critical001[1] {
			t.Errorf("sessions per pool %v: chi-square %.2f over 70/30", pools, chi)
		}
		if len(endpoints) != 3 {
			t.Errorf("canary sessions used %d of 3 endpoints: the ring key must be the cookie, not the shared client IP", len(endpoints))
		}
		if got := testutil.ToFloat64(g.m.sticky); got != clients {
			t.Errorf("dwara_sticky_sessions_total = %v, want %d", got, clients)
		}
	})
}

func TestStickyCookieInvalidIsReplaced(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 1, 1).Sticky("sid", 0).YAML())
		valid := "0123456789abcdef01234567"
		resp, _ := get(t, client, g.URL, map[string]string{"Cookie": "sid=" + valid})
		if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
			t.Errorf("valid cookie presented, got Set-Cookie %q", sc)
		}
		first := resp.Header.Get("X-Pool")
		for i := 0; i < 20; i++ {
			resp, _ := get(t, client, g.URL, map[string]string{"Cookie": "sid=" + valid})
			if resp.Header.Get("X-Pool") != first {
				t.Fatalf("same cookie served by %s then %s", first, resp.Header.Get("X-Pool"))
			}
		}
		for _, bad := range []string{"sid=", "sid=short", "sid=0123456789ABCDEF01234567", "other=1"} {
			resp, _ := get(t, client, g.URL, map[string]string{"Cookie": bad})
			sc := resp.Header.Get("Set-Cookie")
			if !strings.HasPrefix(sc, "sid=") || !cookieRE.MatchString(strings.TrimPrefix(strings.SplitN(sc, ";", 2)[0], "sid=")) {
				t.Errorf("cookie %q: Set-Cookie %q, want a fresh handle", bad, sc)
			}
		}
	})
}

// TestFlipUnderLoad applies a blue-green flip while 8 clients keep sending:
// no request fails, and every request sent after Apply returned is served by
// the new side.
func TestFlipUnderLoad(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		blue := startPool(t, "blue", 2)
		green := startPool(t, "green", 2)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{blue, green}, 100, 0).YAML())

		var (
			flipped              atomic.Bool
			stop                 atomic.Bool
			total                atomic.Int64
			afterFlip            atomic.Int64
			wg                   sync.WaitGroup
			errs                 = make(chan string, 100)
			warm                 = make(chan struct{}) // closed after 200 requests
			enough               = make(chan struct{}) // closed after 400 requests past the flip
			warmOnce, enoughOnce sync.Once
		)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for c := 0; c < 8; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 5000 && !stop.Load() && ctx.Err() == nil; i++ {
					after := flipped.Load()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+"/", nil)
					resp, err := client.Do(req)
					if err != nil {
						errs <- err.Error()
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if total.Add(1) == 200 {
						warmOnce.Do(func() { close(warm) })
					}
					if resp.StatusCode != 200 {
						errs <- fmt.Sprintf("status %d", resp.StatusCode)
						return
					}
					if after {
						if afterFlip.Add(1) == 400 {
							enoughOnce.Do(func() { close(enough) })
						}
						if pool := resp.Header.Get("X-Pool"); pool != "green" {
							errs <- "request sent after the flip served by " + pool
							return
						}
					}
				}
			}()
		}
		// Flip once traffic is flowing.
		select {
		case <-warm:
		case <-ctx.Done():
		}
		g.apply(t, 2, spectest.SplitOver([]*demo.Pool{blue, green}, 0, 100).YAML())
		flipped.Store(true)
		select {
		case <-enough:
		case <-ctx.Done():
		}
		stop.Store(true)
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		if afterFlip.Load() < 400 {
			t.Errorf("only %d requests after the flip", afterFlip.Load())
		}
		if g.Generation() != 2 || testutil.ToFloat64(g.m.generation) != 2 {
			t.Errorf("generation %d, gauge %v; want 2", g.Generation(), testutil.ToFloat64(g.m.generation))
		}
	})
}

func TestStatusBeforeGenerationAndNoMatch(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		g := startGateway(t, front)
		resp, body := get(t, client, g.URL+"/x", nil)
		if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("before any generation: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		g.apply(t, 1, fmt.Sprintf(`
upstreams: [{name: a, endpoints: %s}]
services: [{name: api, base_path: /v1, upstream: a}]
`, endpoints(a)))
		for path, want := range map[string]int{"/v1": 200, "/v1/x": 200, "/v1x": 404, "/": 404, "/v2/v1": 404} {
			resp, body := get(t, client, g.URL+path, nil)
			if resp.StatusCode != want {
				t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
			}
			if want == 404 {
				var prob map[string]any
				if err := json.Unmarshal([]byte(body), &prob); err != nil || prob["status"] != float64(404) {
					t.Errorf("GET %s: 404 body %q is not problem+json", path, body)
				}
			}
		}
	})
}

func TestUnreachableUpstreamIs502(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		dead := testnet.ClosedAddr(t)
		g := startGateway(t, front)
		g.apply(t, 1, fmt.Sprintf(`
upstreams: [{name: dead, endpoints: ["%s"]}]
services: [{name: web, upstream: dead}]
`, dead))
		resp, body := get(t, client, g.URL+"/", map[string]string{"X-Request-Id": "abc-123"})
		if resp.StatusCode != 502 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("status %d %q, want 502 problem+json", resp.StatusCode, body)
		}
		if strings.Contains(body, "connection refused") || strings.Contains(body, dead) {
			t.Errorf("502 body leaks the transport error: %s", body)
		}
		if resp.Header.Get("X-Request-Id") != "abc-123" {
			t.Errorf("X-Request-Id %q not echoed", resp.Header.Get("X-Request-Id"))
		}
		if got := testutil.ToFloat64(g.m.requests.WithLabelValues("web", "dead", "502")); got != 1 {
			t.Errorf("dwara_requests_total{code=502} = %v", got)
		}
	})
}

func TestRequestHeaders(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		g := startGateway(t, front)
		g.apply(t, 7, fmt.Sprintf(`
upstreams: [{name: a, endpoints: %s}]
services: [{name: web, upstream: a}]
`, endpoints(a)))
		echo := func(hdr map[string]string) (demo.Echo, *http.Response) {
			resp, body := get(t, client, g.URL+"/p?echo=1", hdr)
			var e demo.Echo
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("echo: %v: %s", err, body)
			}
			return e, resp
		}
		e, resp := echo(map[string]string{
			"X-Request-Id":       "client.id:1-2_3",
			"X-Dwara-Service":    "forged",
			"X-Dwara-Anything":   "forged",
			"X-Forwarded-For":    "203.0.113.9",
			"X-Dwara-Generation": "999",
		})
		want := map[string]string{
			"X-Request-Id":       "client.id:1-2_3",
			"X-Dwara-Service":    "web",
			"X-Dwara-Upstream":   "a",
			"X-Dwara-Generation": "7",
			"X-Forwarded-For":    "203.0.113.9, 127.0.0.1",
			"X-Forwarded-Proto":  "http",
		}
		for k, v := range want {
			if got := strings.Join(e.Header.Values(k), ","); got != v {
				t.Errorf("upstream saw %s = %q, want %q", k, got, v)
			}
		}
		if e.Header.Get("X-Dwara-Anything") != "" {
			t.Errorf("client X-Dwara-Anything reached the upstream")
		}
		if !strings.HasPrefix(e.Header.Get("X-Forwarded-Host"), "127.0.0.1:") {
			t.Errorf("X-Forwarded-Host %q", e.Header.Get("X-Forwarded-Host"))
		}
		if resp.Header.Get("X-Request-Id") != "client.id:1-2_3" {
			t.Errorf("response X-Request-Id %q", resp.Header.Get("X-Request-Id"))
		}
		for _, bad := range []string{"has space", "semi;colon", strings.Repeat("a", 129), "ünï"} {
			e, _ := echo(map[string]string{"X-Request-Id": bad})
			if got := e.Header.Get("X-Request-Id"); got == bad || !apiv1.ValidRequestID(got) {
				t.Errorf("X-Request-Id %q forwarded as %q, want a fresh id", bad, got)
			}
		}
		e, _ = echo(nil)
		if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(e.Header.Get("X-Request-Id")) {
			t.Errorf("fresh X-Request-Id %q", e.Header.Get("X-Request-Id"))
		}
	})
}

func TestServiceMatching(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		pools := map[string]*demo.Pool{}
		for _, n := range []string{"root", "v1", "v1-admin", "host-root", "host-v1"} {
			pools[n] = startPool(t, n, 1)
		}
		var b strings.Builder
		b.WriteString("upstreams:\n")
		for _, n := range []string{"root", "v1", "v1-admin", "host-root", "host-v1"} {
			fmt.Fprintf(&b, "  - {name: %s, endpoints: %s}\n", n, endpoints(pools[n]))
		}
		b.WriteString(`services:
  - {name: root, base_path: /, upstream: root}
  - {name: v1, base_path: /v1, upstream: v1}
  - {name: v1-admin, base_path: /v1/admin, upstream: v1-admin}
  - {name: host-root, host: api.example.test, base_path: /, upstream: host-root}
  - {name: host-v1, host: api.example.test, base_path: /v1, upstream: host-v1}
`)
		g := startGateway(t, front)
		g.apply(t, 1, b.String())
		tests := []struct{ host, path, want string }{
			{"", "/", "root"},
			{"", "/v1", "v1"},
			{"", "/v1/", "v1"},
			{"", "/v1x", "root"},
			{"", "/v1/admin", "v1-admin"},
			{"", "/v1/admin/users", "v1-admin"},
			{"", "/v1/administrator", "v1"},
			{"api.example.test", "/v1/admin", "host-v1"},
			{"API.Example.Test:8080", "/v1/x", "host-v1"},
			{"api.example.test", "/other", "host-root"},
			{"other.test", "/v1", "v1"},
		}
		for _, tt := range tests {
			req, _ := http.NewRequest(http.MethodGet, g.URL+tt.path, nil)
			if tt.host != "" {
				req.Host = tt.host
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.Header.Get("X-Pool"); got != tt.want {
				t.Errorf("host %q path %q: served by %q, want %q", tt.host, tt.path, got, tt.want)
			}
		}
	})
}

// TestFailoverWhenTargetIsDown marks endpoints down by hand, as a health
// check would.
func TestFailoverWhenTargetIsDown(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		stable := startPool(t, "stable", 2)
		canary := startPool(t, "canary", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{stable, canary}, 50, 50).YAML())
		g.Registry().Get(canary.Addrs[0]).SetUp(false)
		const n = 400
		for i := 0; i < n; i++ {
			resp, _ := get(t, client, g.URL, map[string]string{"X-Request-Id": fmt.Sprintf("f-%d", i)})
			if resp.StatusCode != 200 || resp.Header.Get("X-Pool") != "stable" {
				t.Fatalf("request %d: %d from %q, want 200 from stable", i, resp.StatusCode, resp.Header.Get("X-Pool"))
			}
		}
		fo := testutil.ToFloat64(g.m.failovers.WithLabelValues("web", "canary"))
		if fo < n*0.4 || fo > n*0.6 {
			t.Errorf("dwara_split_failovers_total{upstream=canary} = %v, want about %d", fo, n/2)
		}
		for _, a := range stable.Addrs {
			g.Registry().Get(a).SetUp(false)
		}
		resp, _ := get(t, client, g.URL, nil)
		if resp.StatusCode != 502 {
			t.Errorf("every target down: %d, want 502", resp.StatusCode)
		}
	})
}

// TestApplyInvalidKeepsServing gives Apply specs that were never validated
// (Apply trusts its caller to have done that): whatever the proxy cannot
// compile is refused with an error, not a panic, and the generation already
// applied keeps serving.
func TestApplyInvalidKeepsServing(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, startPool(t, "b", 1)}, 1, 0).YAML())
		up := func(name string, endpoints ...string) config.Upstream {
			if endpoints == nil {
				endpoints = a.Addrs
			}
			return config.Upstream{Name: name, Endpoints: endpoints}
		}
		splitOf := func(weights ...int) *config.Split {
			sp := &config.Split{}
			for _, w := range weights {
				sp.Targets = append(sp.Targets, config.Target{Upstream: "a", Weight: w})
			}
			return sp
		}
		tests := []struct {
			name string
			spec *config.Spec
		}{
			{"nil spec", nil},
			{"unknown upstream", &config.Spec{Services: []config.Service{{Name: "web", Upstream: "nope"}}}},
			{"unknown split target", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web",
				Split: &config.Split{Targets: []config.Target{{Upstream: "a", Weight: 1}, {Upstream: "nope", Weight: 1}}}}}}},
			{"neither upstream nor split", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web"}}}},
			{"total weight 0", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web", Split: splitOf(0, 0)}}}},
			{"negative weight", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web", Split: splitOf(5, -1)}}}},
			{"empty split", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web", Split: splitOf()}}}},
			{"9 targets", &config.Spec{Upstreams: []config.Upstream{up("a")}, Services: []config.Service{{Name: "web", Split: splitOf(1, 1, 1, 1, 1, 1, 1, 1, 1)}}}},
			{"unknown balancer", &config.Spec{Upstreams: []config.Upstream{{Name: "a", Balancer: "random", Endpoints: a.Addrs}},
				Services: []config.Service{{Name: "web", Upstream: "a"}}}},
			{"no endpoints", &config.Spec{Upstreams: []config.Upstream{up("a", []string{}...)}, Services: []config.Service{{Name: "web", Upstream: "a"}}}},
			{"bad endpoint", &config.Spec{Upstreams: []config.Upstream{up("a", "not an endpoint")}, Services: []config.Service{{Name: "web", Upstream: "a"}}}},
		}
		for _, tt := range tests {
			if err := g.Apply(tt.spec, 2); err == nil {
				t.Errorf("%s: Apply accepted it", tt.name)
			}
			if applied, err := g.ApplyNewer(tt.spec, 3); err == nil || applied {
				t.Errorf("%s: ApplyNewer = %t, %v; want refused", tt.name, applied, err)
			}
			resp, _ := get(t, client, g.URL, nil)
			if resp.StatusCode != 200 || g.Generation() != 1 {
				t.Errorf("%s: after a refused apply: %d, generation %d; want 200 by generation 1", tt.name, resp.StatusCode, g.Generation())
			}
		}
	})
}

func TestMetricsExposed(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 1)
		g := startGateway(t, front)
		g.apply(t, 3, fmt.Sprintf(`
upstreams: [{name: a, endpoints: %s}]
services: [{name: web, upstream: a, sticky: {cookie: s}}]
`, endpoints(a)))
		get(t, client, g.URL, nil)
		names := map[string]bool{}
		for _, s := range g.samples(t) {
			names[s.name] = true
		}
		for _, want := range []string{"dwara_split_picks_total", "dwara_sticky_sessions_total", "dwara_requests_total",
			"dwara_request_duration_seconds", "dwara_generation_active", "dwara_generation_apply_seconds", "dwara_upstream_endpoint_up"} {
			if !names[want] {
				t.Errorf("metric %s not exposed", want)
			}
		}
		if got := testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "200")); got != 1 {
			t.Errorf("dwara_requests_total{code=200} = %v", got)
		}
		if math.IsNaN(testutil.ToFloat64(g.m.generation)) {
			t.Error("generation gauge NaN")
		}
	})
}

func BenchmarkProxy(b *testing.B) {
	stable := startPool(b, "stable", 2)
	canary := startPool(b, "canary", 2)
	g := startGateway(b, *benchFront)
	g.apply(b, 1, spectest.SplitOver([]*demo.Pool{stable, canary}, 95, 5).Sticky("sid", 0).YAML())
	benchRequests(b, g.URL)
}

// BenchmarkServeHTTP measures the proxy's own handler with an in-memory
// response writer, so the figure excludes the client side of the loopback.
func BenchmarkServeHTTP(b *testing.B) {
	stable := startPool(b, "stable", 2)
	canary := startPool(b, "canary", 2)
	g := startGateway(b, *benchFront)
	g.apply(b, 1, spectest.SplitOver([]*demo.Pool{stable, canary}, 95, 5).Sticky("sid", 0).YAML())
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "http://gw/bench", nil)
		req.Header.Set("Cookie", "sid=0123456789abcdef01234567")
		req.Header.Set("X-Request-Id", "bench-1")
		w := httptest.NewRecorder()
		httpHandler(g.Proxy).ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}

// TestRoutingAllocs guards the part of the hot path Dwara owns: matching the
// service, reading the affinity cookie, picking the target and the endpoint
// allocate nothing.
func TestRoutingAllocs(t *testing.T) {
	a := startPool(t, "a", 2)
	b := startPool(t, "b", 2)
	g := startGateway(t, "fasthttp") // routing only: no request is served
	g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 95, 5).Sticky("sid", 0).
		Route("hosted", "/x", "a").Host("example.test").Sticky("sid", 0).YAML())
	req := httptest.NewRequest(http.MethodGet, "http://Example.test:8080/x/y", nil)
	if s := g.table.Load().match(req.Host, req.URL.Path); s == nil || s.name != "hosted" {
		t.Fatalf("matched %+v, want the hosted service", s)
	}
	req.Header.Set("Cookie", "theme=dark; sid=0123456789abcdef01234567")
	tbl := g.table.Load()
	// The whole routing step as ServeHTTP runs it: match, cookie, pick,
	// balancer, bookkeeping of the pick.
	// The Request is the front's, kept per exchange and reused (request.go),
	// as in the fronts.
	v := &Request{Host: req.Host, Path: req.URL.Path, Cookies: req.Header["Cookie"], RequestID: "req-1", ClientIP: "192.0.2.1"}
	allocs := testing.AllocsPerRun(1000, func() {
		rt := g.Route(tbl, v)
		if rt.Status != 0 || rt.Endpoint == nil || rt.SetCookie != "" {
			t.Fatalf("route = %+v, want an endpoint and no new cookie", rt)
		}
	})
	if allocs != 0 {
		t.Errorf("routing allocates %.1f times per request, want 0", allocs)
	}
	// A new session: its Set-Cookie and handle are one string, made in
	// the Request's buffer, which the Request keeps (Reset): nothing is
	// allocated once it has grown, and each mint is a new session.
	for _, tls := range []bool{false, true} {
		nv := &Request{Host: req.Host, Path: req.URL.Path, RequestID: "req-2", ClientIP: "192.0.2.1", TLS: tls}
		var rt Route
		allocs = testing.AllocsPerRun(1000, func() { rt = g.Route(tbl, nv) })
		if allocs != 0 {
			t.Errorf("routing a new session (TLS %v) allocates %.1f times, want 0", tls, allocs)
		}
		before := strings.Clone(rt.SetCookie)
		nv.Reset()
		nv.Host, nv.Path, nv.RequestID, nv.ClientIP, nv.TLS = req.Host, req.URL.Path, "req-3", "192.0.2.1", tls
		if rt = g.Route(tbl, nv); rt.SetCookie == before || rt.SetCookie == "" {
			t.Errorf("new session after Reset (TLS %v): Set-Cookie %q, the one before %q", tls, rt.SetCookie, before)
		}
		name, rest, _ := strings.Cut(rt.SetCookie, "=")
		handle, attrs, _ := strings.Cut(rest, ";")
		if name != "sid" || !affinity.Valid(handle) || !strings.Contains(attrs, "Path=/") || strings.HasSuffix(attrs, "; Secure") != tls {
			t.Errorf("new session (TLS %v): Set-Cookie %q", tls, rt.SetCookie)
		}
	}
}

// BenchmarkDirect is BenchmarkProxy's baseline: the same request straight to
// one upstream endpoint, without the proxy. The ratio of the two is the
// proxy's cost on this machine.
func BenchmarkDirect(b *testing.B) {
	stable := startPool(b, "stable", 1)
	benchRequests(b, "http://"+stable.Addrs[0])
}

// benchRequests sends the benchmark's request, with a sticky cookie, to base
// once per iteration.
func benchRequests(b *testing.B, base string) {
	req, _ := http.NewRequest(http.MethodGet, base+"/bench", nil)
	req.Header.Set("Cookie", "sid=0123456789abcdef01234567")
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func TestEndpointUpMetric(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		a := startPool(t, "a", 2)
		b := startPool(t, "b", 1)
		g := startGateway(t, front)
		g.apply(t, 1, spectest.SplitOver([]*demo.Pool{a, b}, 1, 1).YAML())
		up := func() map[string]float64 {
			out := map[string]float64{}
			for _, s := range g.samples(t, "dwara_upstream_endpoint_up") {
				out[s.labels["upstream"]+"/"+s.labels["endpoint"]] = s.value
			}
			return out
		}
		got := up()
		if len(got) != 3 || got["a/"+a.Addrs[0]] != 1 || got["b/"+b.Addrs[0]] != 1 {
			t.Fatalf("endpoint up gauge %v, want 3 endpoints at 1", got)
		}
		g.Registry().Get(a.Addrs[1]).SetUp(false)
		if got := up(); got["a/"+a.Addrs[1]] != 0 || got["a/"+a.Addrs[0]] != 1 {
			t.Errorf("after marking %s down: %v", a.Addrs[1], got)
		}
		g.apply(t, 2, fmt.Sprintf("upstreams: [{name: a, endpoints: %s}]\nservices: [{name: web, upstream: a}]\n", endpoints(a)))
		if got := up(); len(got) != 2 {
			t.Errorf("after upstream b left the configuration: %v, want only a's 2 endpoints", got)
		}
	})
}
