package source_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/demo"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/config/spectest"
	"github.com/dwara/dwara/gateway/proxy"
	"github.com/dwara/dwara/gateway/proxy/httpfront"
	"github.com/dwara/dwara/gateway/source"
	"github.com/dwara/dwara/internal/testlog"
)

// load is one call of File.Loaded.
type load struct {
	gen int64
	err error
}

// records decodes the JSON log lines written to b so far.
func records(t *testing.T, b *testlog.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// harness is a File feeding a real proxy on a loopback listener, with two
// demo pools, "blue" and "green", as its upstreams.
type harness struct {
	path        string
	blue, green *demo.Pool
	px          *proxy.Proxy
	url         string
	client      *http.Client
	loads       chan load
	reload      chan struct{}
	logs        *testlog.Buffer
}

// newHarness starts two pools and a proxy; the source is not running yet.
func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{
		path:   filepath.Join(t.TempDir(), "dwara.yaml"),
		loads:  make(chan load, 16),
		reload: make(chan struct{}, 1),
		logs:   &testlog.Buffer{},
		client: &http.Client{Timeout: wait},
	}
	var err error
	if h.blue, err = demo.StartPool("blue", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.blue.Close)
	if h.green, err = demo.StartPool("green", 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.green.Close)
	h.px = proxy.New(proxy.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(httpfront.Handler(h.px))
	t.Cleanup(srv.Close)
	t.Cleanup(h.client.CloseIdleConnections)
	h.url = srv.URL + "/"
	return h
}

// source returns a File wired to the harness; ctx bounds the callback's
// send so a test that stopped reading never blocks the source forever.
func (h *harness) source(ctx context.Context) *source.File {
	return &source.File{
		Path: h.path,
		Apply: func(_ context.Context, spec *config.Spec, generation int64) error {
			return h.px.Apply(spec, generation)
		},
		Reload: h.reload,
		Logger: slog.New(slog.NewJSONHandler(h.logs, nil)),
		Loaded: func(gen int64, err error) {
			select {
			case h.loads <- load{gen, err}:
			case <-ctx.Done():
			}
		},
	}
}

// run starts src and waits for its first load to succeed with generation 1.
// The source stops, and Run must return nil, at the end of the test.
func (h *harness) run(t *testing.T, src *source.File) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		timeout := time.After(wait)
		for {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run after cancel: %v", err)
				}
				return
			case <-h.loads: // unblock a Loaded the test did not read
			case <-timeout:
				t.Errorf("Run did not return within %v of cancel", wait)
				return
			}
		}
	})
	if l := h.next(t); l.gen != 1 || l.err != nil {
		t.Fatalf("first load = (%d, %v), want (1, <nil>)", l.gen, l.err)
	}
}

// start writes content to the file and runs a source on it.
func (h *harness) start(t *testing.T, content string) {
	t.Helper()
	writeFile(t, h.path, content)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.run(t, h.source(ctx))
}

// next waits for the next load attempt.
func (h *harness) next(t *testing.T) load {
	t.Helper()
	select {
	case l := <-h.loads:
		return l
	case <-time.After(wait):
		t.Fatalf("no load within %v", wait)
		return load{}
	}
}

// awaitGeneration waits until a load applies generation want. A write in
// place may be seen half-done (truncated, not yet written) and refused
// first; such refusals are skipped, any other generation is a failure.
func (h *harness) awaitGeneration(t *testing.T, want int64) {
	t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case l := <-h.loads:
			switch {
			case l.gen == want && l.err == nil:
				return
			case l.gen != 0:
				t.Fatalf("load applied generation %d, want %d", l.gen, want)
			}
		case <-deadline:
			t.Fatalf("generation %d not applied within %v", want, wait)
		}
	}
}

// serve sends n requests through the proxy and counts them by the pool that
// answered ("" for a response without X-Pool) and by the generation the
// request was served by.
func (h *harness) serve(t *testing.T, n int) (pools map[string]int, gens map[string]int) {
	t.Helper()
	pools, gens = map[string]int{}, map[string]int{}
	for range n {
		resp, err := h.client.Get(h.url)
		if err != nil {
			t.Fatalf("GET through proxy: %v", err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET through proxy: status %d: %s", resp.StatusCode, body)
		}
		pools[resp.Header.Get("X-Pool")]++
		// The demo answers "pool=... endpoint=... generation=N path=...".
		var g string
		for f := range strings.FieldsSeq(string(body)) {
			if v, ok := strings.CutPrefix(f, "generation="); ok {
				g = v
			}
		}
		gens[g]++
	}
	return pools, gens
}

// expectServed checks that all of n requests are served by pool under
// generation gen.
func (h *harness) expectServed(t *testing.T, pool string, gen int64) {
	t.Helper()
	const n = 40
	pools, gens := h.serve(t, n)
	if pools[pool] != n {
		t.Errorf("requests by pool = %v, want all %d by %s", pools, n, pool)
	}
	if g := fmt.Sprint(gen); gens[g] != n {
		t.Errorf("requests by generation = %v, want all %d by %s", gens, n, g)
	}
	if got := h.px.Generation(); got != gen {
		t.Errorf("proxy generation = %d, want %d", got, gen)
	}
}

// splitSpec is a service on "/" split between blue and green.
func (h *harness) splitSpec(blue, green int) string {
	return spectest.SplitOver([]*demo.Pool{h.blue, h.green}, blue, green).YAML()
}

// misspellGreen names the green target "gren", an unknown upstream.
func misspellGreen(s *config.Spec) { s.Services[0].Split.Targets[1].Upstream = "gren" }

// writeFile writes content in place (truncate, then write), as `echo >` or
// a plain editor save does.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replaceFile writes content to a temporary file in the same directory and
// renames it over path, as editors and config managers do.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestFirstLoadAppliesGenerationOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(t, h.splitSpec(100, 0))
	h.expectServed(t, "blue", 1)
	if h.green.Hits(0) != 0 {
		t.Errorf("green served %d requests at weight 0", h.green.Hits(0))
	}
	if rs := records(t, h.logs); len(rs) == 0 || rs[len(rs)-1]["msg"] != "generation applied" || rs[len(rs)-1]["generation"] != 1.0 {
		t.Errorf("last log record = %v, want generation applied with generation 1", rs)
	}
}

func TestRunFailsOnBadFirstFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content *string // nil: the file does not exist
		wantErr func(error) bool
	}{
		{
			name:    "missing file",
			wantErr: func(err error) bool { return errors.Is(err, fs.ErrNotExist) },
		},
		{
			name:    "empty file",
			content: ptr(""),
			wantErr: isValidation,
		},
		{
			name:    "invalid YAML",
			content: ptr("upstreams: [\n  - name: blue\n"),
			wantErr: isValidation,
		},
		{
			name: "unknown upstream",
			content: ptr(`upstreams:
  - name: blue
    endpoints: ["127.0.0.1:1"]
services:
  - name: web
    base_path: /
    upstream: green
`),
			wantErr: isValidation,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if tt.content != nil {
				writeFile(t, h.path, *tt.content)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- h.source(ctx).Run(ctx) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(wait):
				t.Fatalf("Run did not return within %v on a bad first file", wait)
			}
			if err == nil || !tt.wantErr(err) {
				t.Fatalf("Run = %v, want the %s error", err, tt.name)
			}
			if !strings.Contains(err.Error(), h.path) {
				t.Errorf("Run error %q does not name the file %s", err, h.path)
			}
			if l := h.next(t); l.gen != 0 || l.err == nil {
				t.Errorf("Loaded(%d, %v), want (0, error)", l.gen, l.err)
			}
			if g := h.px.Generation(); g != 0 {
				t.Errorf("proxy generation = %d, want 0: nothing applied", g)
			}
		})
	}
}

func TestFileChangeSwitchesSplit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		write func(t *testing.T, path, content string)
	}{
		{"write in place", writeFile},
		{"replace by rename", replaceFile},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.start(t, h.splitSpec(100, 0))
			h.expectServed(t, "blue", 1)

			tt.write(t, h.path, h.splitSpec(0, 100))
			h.awaitGeneration(t, 2)
			h.expectServed(t, "green", 2)

			tt.write(t, h.path, h.splitSpec(100, 0))
			h.awaitGeneration(t, 3)
			h.expectServed(t, "blue", 3)
		})
	}
}

// TestChangeDuringFirstLoadIsSeen changes the file while the first load is
// being reported, before Run returns to its loop: the watch must already be
// in place, or the change is lost until the next one.
func TestChangeDuringFirstLoadIsSeen(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	writeFile(t, h.path, h.splitSpec(100, 0))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	src := h.source(ctx)
	loaded := src.Loaded
	src.Loaded = func(gen int64, err error) {
		if gen == 1 {
			// Run's goroutine: report, never t.Fatal.
			tmp := h.path + ".tmp"
			if err := os.WriteFile(tmp, []byte(h.splitSpec(0, 100)), 0o644); err != nil {
				t.Errorf("write %s: %v", tmp, err)
			} else if err := os.Rename(tmp, h.path); err != nil {
				t.Errorf("rename %s: %v", tmp, err)
			}
		}
		loaded(gen, err)
	}
	h.run(t, src)
	h.awaitGeneration(t, 2)
	h.expectServed(t, "green", 2)
}

func TestBrokenFileKeepsGeneration(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// breakFile makes the file unusable.
		breakFile func(t *testing.T, h *harness)
		// check inspects the refusal's error.
		check func(t *testing.T, err error)
	}{
		{
			name: "invalid YAML",
			breakFile: func(t *testing.T, h *harness) {
				replaceFile(t, h.path, "upstreams:\n  - name: blue\n   endpoints: [\n")
			},
			check: func(t *testing.T, err error) {
				if !isValidation(err) || !strings.Contains(err.Error(), "invalid YAML") {
					t.Errorf("refusal = %v, want an invalid YAML validation error", err)
				}
			},
		},
		{
			name: "unknown upstream",
			breakFile: func(t *testing.T, h *harness) {
				replaceFile(t, h.path, spectest.SplitOver([]*demo.Pool{h.blue, h.green}, 0, 100).Edit(misspellGreen).YAML())
			},
			check: func(t *testing.T, err error) {
				want := config.FieldError{
					Path:    "services[0].split.targets[1].upstream",
					Message: `unknown upstream "gren"; did you mean "green"?`,
				}
				if fes := fieldErrors(err); len(fes) != 1 || fes[0] != want {
					t.Errorf("refusal errors = %v (%v), want [%v]", fes, err, want)
				}
			},
		},
		{
			name: "file moved away",
			breakFile: func(t *testing.T, h *harness) {
				if err := os.Rename(h.path, h.path+".bak"); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("refusal = %v, want a not-exist error", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.start(t, h.splitSpec(100, 0))

			tt.breakFile(t, h)
			l := h.next(t)
			if l.gen != 0 || l.err == nil {
				t.Fatalf("Loaded(%d, %v) for a broken file, want (0, error)", l.gen, l.err)
			}
			tt.check(t, l.err)
			h.expectServed(t, "blue", 1)

			replaceFile(t, h.path, h.splitSpec(0, 100))
			h.awaitGeneration(t, 2)
			h.expectServed(t, "green", 2)
		})
	}
}

func TestReloadChannel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		trigger func(t *testing.T, h *harness)
		wantGen int64 // of the load the trigger causes; 0: nothing applied
	}{
		{
			name:    "signal reloads unchanged content",
			trigger: func(_ *testing.T, h *harness) { h.reload <- struct{}{} },
			wantGen: 2,
		},
		{
			name:    "unchanged file write applies nothing",
			trigger: func(t *testing.T, h *harness) { replaceFile(t, h.path, h.splitSpec(100, 0)) },
			wantGen: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			h.start(t, h.splitSpec(100, 0))

			tt.trigger(t, h)
			if l := h.next(t); l.gen != tt.wantGen || l.err != nil {
				t.Fatalf("Loaded(%d, %v), want (%d, <nil>)", l.gen, l.err, tt.wantGen)
			}
			h.expectServed(t, "blue", max(tt.wantGen, 1))
		})
	}
}

func TestReloadSignalAppliesChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(t, h.splitSpec(100, 0))
	replaceFile(t, h.path, h.splitSpec(0, 100))
	h.reload <- struct{}{}
	// The signal and the file event race; whichever comes first applies
	// generation 2, and the other is then a no-op (unchanged content) or a
	// forced generation 3. Either way green serves.
	h.awaitGeneration(t, 2)
	if !strings.Contains(h.logs.String(), `"msg":"reload requested"`) {
		t.Errorf("log has no reload requested record:\n%s", h.logs)
	}
	pools, _ := h.serve(t, 40)
	if pools["green"] != 40 {
		t.Errorf("requests by pool = %v, want all 40 by green", pools)
	}
}

func TestBrokenFileLogsEveryError(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start(t, h.splitSpec(100, 0))

	broken := fmt.Sprintf(`upstreams:
  - name: Blue_Upper
    endpoints: []
  - name: green
    balancer: fastest
    endpoints: [%q]
services:
  - name: web
    base_path: /
    split:
      targets:
        - { upstream: blue, weight: 100 }
        - { upstream: green, weight: -1 }
`, h.green.Addrs[0])
	replaceFile(t, h.path, broken)
	l := h.next(t)
	if l.gen != 0 || l.err == nil {
		t.Fatalf("Loaded(%d, %v) for a broken file, want (0, error)", l.gen, l.err)
	}
	fes := fieldErrors(l.err)
	want := []string{
		"upstreams[0].name",
		"upstreams[0].endpoints",
		"upstreams[1].balancer",
		"services[0].split.targets[0].upstream",
		"services[0].split.targets[1].weight",
	}
	gotPaths := map[string]bool{}
	for _, fe := range fes {
		gotPaths[fe.Path] = true
	}
	for _, p := range want {
		if !gotPaths[p] {
			t.Errorf("refusal %v has no error at %s", l.err, p)
		}
	}

	// Every error of the refusal is one log record with its path and
	// message, followed by one summary record.
	logged := map[config.FieldError]bool{}
	refused := 0
	for _, r := range records(t, h.logs) {
		switch r["msg"] {
		case "spec file error":
			if r["level"] != "ERROR" || r["file"] != h.path {
				t.Errorf("spec file error record %v: want level ERROR and file %s", r, h.path)
			}
			path, _ := r["path"].(string)
			msg, _ := r["error"].(string)
			logged[config.FieldError{Path: path, Message: msg}] = true
		case "spec file refused; the current generation keeps serving":
			refused++
		}
	}
	for _, fe := range fes {
		if !logged[fe] {
			t.Errorf("error %v not logged; log:\n%s", fe, h.logs)
		}
	}
	if len(logged) != len(fes) {
		t.Errorf("logged %d distinct field errors, want %d", len(logged), len(fes))
	}
	if refused != 1 {
		t.Errorf("logged %d refusal records, want 1", refused)
	}
	h.expectServed(t, "blue", 1)
}

func ptr[T any](v T) *T { return &v }

func isValidation(err error) bool {
	var ve *config.ValidationError
	return errors.As(err, &ve)
}

func fieldErrors(err error) []config.FieldError {
	var ve *config.ValidationError
	if !errors.As(err, &ve) {
		return nil
	}
	return ve.Errors
}
