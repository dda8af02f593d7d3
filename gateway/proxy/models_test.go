package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/fakeai"
	"github.com/dwara/dwara/internal/testrun"
	"github.com/dwara/dwara/internal/teststat"
)

// fakeUpstream is a fakeai server on loopback that keeps the bodies it
// was sent, by request id.
type fakeUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string][]byte
}

func startFake(t testing.TB, o fakeai.Options) *fakeUpstream {
	t.Helper()
	f := &fakeUpstream{bodies: map[string][]byte{}}
	o.Record = func(r *http.Request, body []byte) {
		f.mu.Lock()
		f.bodies[r.Header.Get("X-Request-Id")] = body
		f.mu.Unlock()
	}
	f.Server = httptest.NewServer(fakeai.New(o))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeUpstream) addr() string { return strings.TrimPrefix(f.URL, "http://") }

func (f *fakeUpstream) body(rid string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[rid]
}

// modelSpec is a service llm on /v1 whose own upstream is def, with an
// alias chat-prod over a (gpt-4o) and b (llama-3.1-70b), weighted wa/wb.
func modelSpec(def, a, b *fakeUpstream, wa, wb int, extra string) string {
	return fmt.Sprintf(`upstreams:
  - {name: default, endpoints: [%q]}
  - {name: openai-a, endpoints: [%q]}
  - {name: vllm-b, endpoints: [%q]}
services:
  - name: llm
    base_path: /v1
    upstream: default
%s    models:
      - alias: chat-prod
        affinity: user
        targets:
          - {upstream: openai-a, model: gpt-4o, weight: %d}
          - {upstream: vllm-b, model: llama-3.1-70b, weight: %d}
`, def.addr(), a.addr(), b.addr(), extra, wa, wb)
}

// modelGateway starts the fake upstreams default, openai-a and vllm-b and
// a gateway of front serving modelSpec over them at wa/wb.
func modelGateway(t testing.TB, front string, wa, wb int) (g *gateway, def, a, b *fakeUpstream) {
	t.Helper()
	def = startFake(t, fakeai.Options{Name: "default"})
	a = startFake(t, fakeai.Options{Name: "openai-a"})
	b = startFake(t, fakeai.Options{Name: "vllm-b"})
	g = startGateway(t, front)
	g.apply(t, 1, modelSpec(def, a, b, wa, wb, ""))
	return g, def, a, b
}

func postModel(t testing.TB, url, rid, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", rid)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestModelAliasSplit: 2,000 requests to an alias at 90/10 split within a
// chi-square at p = 0.001 (the request ids fixed: no "user", so keyed by
// them); each upstream was sent its own model, every other byte of the
// body as the client sent it; a model that is no alias and a request to
// another path reach the service's upstream with the body untouched;
// dwara_model_requests_total and the tokens of the JSON answers count
// them.
func TestModelAliasSplit(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g, def, a, b := modelGateway(t, front, 90, 10)
		models := map[string]string{"openai-a": "gpt-4o", "vllm-b": "llama-3.1-70b"}

		const n = 2000
		count := map[string]int{}
		for i := range n {
			rid := fmt.Sprintf("alias-%d", i)
			body := fmt.Sprintf(`{"temperature": 0.5, "messages":[{"role":"user","content":"hi \u00e9 \"q\" %d"}],  "model" : "chat-prod", "n":1}`, i)
			resp, _ := postModel(t, g.URL+"/v1/chat/completions", rid, body, nil)
			up := resp.Header.Get("X-Fake-Upstream")
			want, ok := models[up]
			if resp.StatusCode != http.StatusOK || !ok || resp.Header.Get("X-Fake-Model") != want {
				t.Fatalf("request %d: %d from %q with model %q", i, resp.StatusCode, up, resp.Header.Get("X-Fake-Model"))
			}
			count[up]++
			f := a
			if up == "vllm-b" {
				f = b
			}
			if got, exp := f.body(rid), strings.Replace(body, `"chat-prod"`, `"`+want+`"`, 1); string(got) != exp {
				t.Fatalf("request %d: %s got body\n%s\nwant\n%s", i, up, got, exp)
			}
		}
		observed := []int{count["openai-a"], count["vllm-b"]}
		if chi := teststat.ChiSquare(observed, []int{90, 10}); chi > teststat.Critical001[1] {
			t.Errorf("split %v of %d, chi-square %.2f > %.3f (p = 0.001) for 90/10", observed, n, chi, teststat.Critical001[1])
		}
		for up, model := range models {
			if got := testutil.ToFloat64(g.m.modelRequests.WithLabelValues("llm", "chat-prod", up, model, "200")); got != float64(count[up]) {
				t.Errorf("dwara_model_requests_total{%s,%s,200} = %v, want %d", up, model, got, count[up])
			}
			if got := testutil.ToFloat64(g.m.modelTokens.WithLabelValues("llm", "chat-prod", up, "completion")); got != float64(count[up]*fakeai.DefaultEvents) {
				t.Errorf("completion tokens of %s = %v, want %d", up, got, count[up]*fakeai.DefaultEvents)
			}
		}

		// Not an alias, no model, another path: the service's upstream,
		// the body as sent.
		for i, c := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`},
			{"/v1/embeddings", `{"input":"x"}`},
			{"/v1/chat/completions/x", `{"model":"chat-prod"}`},
		} {
			rid := fmt.Sprintf("plain-%d", i)
			resp, _ := postModel(t, g.URL+c.path, rid, c.body, nil)
			if up := resp.Header.Get("X-Fake-Upstream"); up != "default" || string(def.body(rid)) != c.body {
				t.Errorf("POST %s %s: from %q (%d), body there %q", c.path, c.body, up, resp.StatusCode, def.body(rid))
			}
		}
	})
}

// TestModelAliasAffinity: with affinity user, 200 conversations of 10
// requests each (each request its own id) never change model while the
// weights stay; both models serve some.
func TestModelAliasAffinity(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g, _, _, _ := modelGateway(t, front, 50, 50)
		seen := map[string]int{}
		for c := range 200 {
			first := ""
			for i := range 10 {
				body := fmt.Sprintf(`{"model":"chat-prod","user":"conv-%d","messages":[{"role":"user","content":"turn %d"}]}`, c, i)
				resp, _ := postModel(t, g.URL+"/v1/chat/completions", fmt.Sprintf("aff-%d-%d", c, i), body, nil)
				m := resp.Header.Get("X-Fake-Model")
				if resp.StatusCode != http.StatusOK || m == "" {
					t.Fatalf("conversation %d turn %d: %d, model %q", c, i, resp.StatusCode, m)
				}
				if first == "" {
					first = m
					seen[m]++
				} else if m != first {
					t.Fatalf("conversation %d changed model at turn %d: %s, then %s", c, i, first, m)
				}
			}
		}
		if seen["gpt-4o"] == 0 || seen["llama-3.1-70b"] == 0 {
			t.Errorf("conversations by model %v: at 50/50 both serve some", seen)
		}
	})
}

// TestModelAliasStream: a streamed answer of 50 events 20 ms apart reaches
// the client as 50 reads with one event each (no two coalesced: each was
// flushed as it came), then the usage chunk and [DONE]; its time to first
// token is recorded once and its usage counted.
func TestModelAliasStream(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		// Event i leaves the upstream only once the client has read event
		// i-1 (Pace): a proxy that held an event back would stall the
		// stream, and no two events can arrive in one read however slow
		// the machine.
		read := make(chan struct{}, 1)
		pace := func(r *http.Request, i int) bool {
			select {
			case <-read:
				return true
			case <-r.Context().Done():
				return false
			case <-time.After(wait):
				t.Errorf("event %d: the client did not get event %d within %v: the proxy held it back", i, i-1, wait)
				return false
			}
		}
		def := startFake(t, fakeai.Options{Name: "default"})
		a := startFake(t, fakeai.Options{Name: "openai-a", Events: 50, Delay: 20 * time.Millisecond, Pace: pace})
		g := startGateway(t, front)
		g.apply(t, 1, modelSpec(def, a, a, 1, 0, ""))
		body := `{"model":"chat-prod","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"tell me"}]}`
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Request-Id", "stream-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var all bytes.Buffer
		buf := make([]byte, 64<<10)
		contentReads, most := 0, 0
		for range 1000 { // bounded: 50 events and a few more reads
			n, err := resp.Body.Read(buf)
			if k := bytes.Count(buf[:n], []byte(`"content":"tok`)); k > 0 {
				contentReads++
				most = max(most, k)
				for range k {
					select {
					case read <- struct{}{}:
					default:
					}
				}
			}
			all.Write(buf[:n])
			if err != nil {
				break
			}
		}
		if contentReads != 50 || most != 1 {
			t.Errorf("the 50 events came in %d reads (at most %d in one), want 50 of one each", contentReads, most)
		}
		s := all.String()
		if !strings.Contains(s, `"usage":{`) || !strings.HasSuffix(s, "data: [DONE]\n\n") || !strings.Contains(s, `"model":"gpt-4o"`) {
			t.Errorf("stream lacks the usage chunk, [DONE] or the target's model:\n%s", s[max(0, len(s)-400):])
		}
		if got := histogramCount(t, g, "dwara_model_ttft_seconds"); got != 1 {
			t.Errorf("dwara_model_ttft_seconds count %d, want 1", got)
		}
		if got := testutil.ToFloat64(g.m.modelTokens.WithLabelValues("llm", "chat-prod", "openai-a", "completion")); got != 50 {
			t.Errorf("completion tokens %v, want 50 (from the usage chunk)", got)
		}
		sent := a.body("stream-1")
		if got := testutil.ToFloat64(g.m.modelTokens.WithLabelValues("llm", "chat-prod", "openai-a", "prompt")); got != float64(len(strings.Fields(string(sent)))) {
			t.Errorf("prompt tokens %v, want %d", got, len(strings.Fields(string(sent))))
		}
	})
}

// histogramCount is the sample count of every series of histogram name.
func histogramCount(t *testing.T, g *gateway, name string) uint64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

// TestModelAliasClientGone: a client that goes away in the middle of a
// stream ends the upstream's request.
func TestModelAliasClientGone(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		ended := make(chan struct{}, 1)
		fake := fakeai.New(fakeai.Options{Events: 1000, Delay: 10 * time.Millisecond})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fake.ServeHTTP(w, r)
			if r.Context().Err() != nil {
				ended <- struct{}{}
			}
		}))
		t.Cleanup(up.Close)
		f := &fakeUpstream{Server: up}
		g := startGateway(t, front)
		g.apply(t, 1, modelSpec(f, f, f, 1, 1, ""))
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"chat-prod","stream":true,"messages":[]}`))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		for got := 0; got < 3; got++ {
			if _, err := resp.Body.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
		cancel()
		resp.Body.Close()
		testrun.Recv(t, ended, "the upstream's request ended by the client going away")
	})
}

// TestModelAliasRefusals: a body over max_body_bytes is 413 (with a
// Content-Length or chunked), one that is not a JSON object, or whose
// model is not a string, 400 problem+json; a good request follows on the
// same client.
func TestModelAliasRefusals(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		def := startFake(t, fakeai.Options{Name: "default"})
		a := startFake(t, fakeai.Options{Name: "openai-a"})
		g := startGateway(t, front)
		g.apply(t, 1, modelSpec(def, a, a, 1, 0, "    max_body_bytes: 1024\n"))
		big := `{"model":"chat-prod","messages":[{"role":"user","content":"` + strings.Repeat("x", 2000) + `"}]}`
		for _, c := range []struct {
			name, body string
			chunked    bool
			want       int
			detail     string
		}{
			{"too large", big, false, http.StatusRequestEntityTooLarge, "over the 1024 bytes (max_body_bytes)"},
			{"too large chunked", big, true, http.StatusRequestEntityTooLarge, "over the 1024 bytes (max_body_bytes)"},
			{"not an object", `[{"model":"chat-prod"}]`, false, http.StatusBadRequest, "not a JSON object"},
			{"not json", `{"model":"chat-prod"`, false, http.StatusBadRequest, "not a JSON object"},
			{"model not a string", `{"model":7}`, false, http.StatusBadRequest, "not a string"},
			{"model twice", `{"model":"chat-prod","model":"x"}`, false, http.StatusBadRequest, "named twice"},
			{"empty", ``, false, http.StatusBadRequest, "needs a JSON object body"},
		} {
			var body io.Reader = strings.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(strings.NewReader(c.body[:10]), strings.NewReader(c.body[10:]))
			}
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", body)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want || resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(got), c.detail) {
				t.Errorf("%s: %d %s %s, want %d problem+json saying %q", c.name, resp.StatusCode, resp.Header.Get("Content-Type"), got, c.want, c.detail)
			}
			resp, _ = postModel(t, g.URL+"/v1/chat/completions", "after", `{"model":"chat-prod"}`, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Fake-Model") != "gpt-4o" {
				t.Fatalf("after %s: %d, model %q", c.name, resp.StatusCode, resp.Header.Get("X-Fake-Model"))
			}
		}
		// A body sent chunked within the bound is routed, and sent on
		// with its length.
		body := `{"model":"chat-prod","messages":[{"role":"user","content":"chunked"}]}`
		req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions", io.MultiReader(strings.NewReader(body[:9]), strings.NewReader(body[9:])))
		req.Header.Set("X-Request-Id", "chunked-1")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := strings.Replace(body, "chat-prod", "gpt-4o", 1); resp.StatusCode != http.StatusOK || string(a.body("chunked-1")) != want {
			t.Errorf("chunked: %d, upstream got %q, want %q", resp.StatusCode, a.body("chunked-1"), want)
		}
	})
}

// bodyOf is a BodySource over a fixed body, for the benchmarks.
type bodyOf struct{ r bytes.Reader }

func (b *bodyOf) RequestBody() io.Reader { return &b.r }

// BenchmarkRouteModelAlias measures Route for a POST whose 2 KiB body
// names an alias: the body read into a pooled buffer, the scan, the pick
// and the rewrite. BenchmarkRoute* of other paths measure the rest.
func BenchmarkRouteModelAlias(b *testing.B) {
	p := New(Options{})
	defer p.Close()
	spec := mustParse(b, `upstreams:
  - {name: default, endpoints: ["127.0.0.1:9001"]}
  - {name: openai-a, endpoints: ["127.0.0.1:9002"]}
  - {name: vllm-b, endpoints: ["127.0.0.1:9003"]}
services:
  - name: llm
    base_path: /v1
    upstream: default
    models:
      - alias: chat-prod
        affinity: user
        targets:
          - {upstream: openai-a, model: gpt-4o, weight: 95}
          - {upstream: vllm-b, model: llama-3.1-70b, weight: 5}
`)
	if err := p.Apply(spec, 1); err != nil {
		b.Fatal(err)
	}
	t := p.table.Load()
	body := []byte(`{"model":"chat-prod","user":"u-1","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 165) + `"}],"temperature":0.2}`)
	b.Logf("body %d bytes", len(body))
	src := &bodyOf{}
	v := &Request{Method: "POST", Host: "x", Path: "/v1/chat/completions", RequestID: "r-1", ClientIP: "192.0.2.1", Body: src}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		src.r.Reset(body)
		v.Length = int64(len(body))
		rt := p.Route(t, v)
		if rt.Status != 0 || rt.Body == nil || rt.Target.model == nil {
			b.Fatalf("route %+v", rt)
		}
		rt.Body.Release()
	}
}

// TestModelRoutingAllocs: the alias route of a 2 KiB body allocates
// nothing once its buffer is pooled, and a GET of the same service none.
func TestModelRoutingAllocs(t *testing.T) {
	def := startFake(t, fakeai.Options{})
	g := startGateway(t, "fasthttp") // routing only
	g.apply(t, 1, modelSpec(def, def, def, 95, 5, ""))
	tbl := g.table.Load()
	body := []byte(`{"model":"chat-prod","user":"u-1","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 165) + `"}]}`)
	src := &bodyOf{}
	v := &Request{Method: "POST", Host: "x", Path: "/v1/chat/completions", RequestID: "r-1", ClientIP: "192.0.2.1", Body: src}
	allocs := testing.AllocsPerRun(1000, func() {
		src.r.Reset(body)
		v.Length = int64(len(body))
		rt := g.Route(tbl, v)
		if rt.Status != 0 || rt.Target.model == nil {
			t.Fatalf("route %+v", rt)
		}
		rt.Body.Release()
	})
	if allocs > 0 && !raceEnabled {
		t.Errorf("the alias route allocates %.1f times per request, want 0", allocs)
	}
	other := &Request{Method: "GET", Host: "x", Path: "/v1/models", RequestID: "r-2", ClientIP: "192.0.2.1", Body: src}
	if allocs := testing.AllocsPerRun(1000, func() {
		if rt := g.Route(tbl, other); rt.Status != 0 || rt.Body != nil {
			t.Fatalf("route %+v", rt)
		}
	}); allocs != 0 {
		t.Errorf("another path allocates %.1f times per request, want 0", allocs)
	}
}

// TestModelAliasSkipsDownTarget: a target whose every endpoint is marked
// down is skipped by the alias's walk (counted as a failover of it); with
// none up the request is 502.
func TestModelAliasSkipsDownTarget(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		g, _, a, b := modelGateway(t, front, 50, 50)
		g.Registry().Get(b.addr()).SetUp(false)
		const n = 200
		for i := range n {
			body := fmt.Sprintf(`{"model":"chat-prod","user":"u-%d"}`, i)
			resp, _ := postModel(t, g.URL+"/v1/chat/completions", fmt.Sprintf("down-%d", i), body, nil)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Fake-Model") != "gpt-4o" {
				t.Fatalf("request %d: %d, model %q; want gpt-4o, its other target being down", i, resp.StatusCode, resp.Header.Get("X-Fake-Model"))
			}
		}
		if got := testutil.ToFloat64(g.m.failovers.WithLabelValues("llm", "vllm-b")); got == 0 || got == n {
			t.Errorf("dwara_split_failovers_total{llm,vllm-b} = %v, want the share picked there (about half of %d)", got, n)
		}
		g.Registry().Get(a.addr()).SetUp(false)
		if resp, body := postModel(t, g.URL+"/v1/chat/completions", "none-up", `{"model":"chat-prod"}`, nil); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "model chat-prod") {
			t.Errorf("with no target up: %d %s, want 502", resp.StatusCode, body)
		}
	})
}

// TestModelAlias429CountedApart: a provider answering 429 at 30% has those
// answers counted under their own code, beside the 200s, and relayed as
// they came.
func TestModelAlias429CountedApart(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		def := startFake(t, fakeai.Options{Name: "default"})
		a := startFake(t, fakeai.Options{Name: "openai-a", RateLimitRate: 0.3, Seed: 3})
		g := startGateway(t, front)
		g.apply(t, 1, modelSpec(def, a, a, 1, 0, ""))
		codes := map[int]int{}
		for i := range 300 {
			resp, _ := postModel(t, g.URL+"/v1/chat/completions", fmt.Sprintf("rl-%d", i), `{"model":"chat-prod"}`, nil)
			codes[resp.StatusCode]++
			if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "1" {
				t.Fatalf("request %d: 429 without the provider's Retry-After", i)
			}
		}
		if codes[429] == 0 || codes[200]+codes[429] != 300 {
			t.Fatalf("codes %v", codes)
		}
		for code, n := range codes {
			if got := testutil.ToFloat64(g.m.modelRequests.WithLabelValues("llm", "chat-prod", "openai-a", "gpt-4o", fmt.Sprint(code))); got != float64(n) {
				t.Errorf("dwara_model_requests_total{code=%d} = %v, want %d", code, got, n)
			}
		}
	})
}
