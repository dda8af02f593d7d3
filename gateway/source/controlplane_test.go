package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
	"github.com/dwara/dwara/gateway/source"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// fakeAPI is the part of serve's API a ControlPlane calls.
type fakeAPI struct {
	t        *testing.T
	mu       sync.Mutex
	current  int64
	canary   apiv1.CanaryList
	events   chan string // raw "event: ...\ndata: ...\n\n" blocks
	connects atomic.Int64
	reports  chan apiv1.GatewayInstance
	silent   atomic.Bool // the next streams send nothing after ": connected"
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer tok" {
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	switch {
	case r.URL.Path == "/api/v1/events":
		f.connects.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": connected\n\n")
		w.(http.Flusher).Flush()
		if f.silent.Load() {
			<-r.Context().Done()
			return
		}
		for {
			select {
			case <-r.Context().Done():
				return
			case e := <-f.events:
				fmt.Fprint(w, e)
				w.(http.Flusher).Flush()
			}
		}
	case r.URL.Path == "/api/v1/generations/current":
		f.mu.Lock()
		id := f.current
		f.mu.Unlock()
		if id == 0 {
			http.Error(w, "none", http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(apiv1.Generation{ID: id, Spec: spec(int(id))})
	case strings.HasPrefix(r.URL.Path, "/api/v1/generations/"):
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.URL.Path, "/api/v1/generations/"), 10, 64)
		_ = json.NewEncoder(w).Encode(apiv1.Generation{ID: id, Spec: spec(int(id))})
	case r.URL.Path == "/api/v1/canary":
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(f.canary)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/api/v1/gateways/"):
		var gi apiv1.GatewayInstance
		if err := json.NewDecoder(r.Body).Decode(&gi); err != nil {
			f.t.Errorf("report: %v", err)
		}
		select {
		case f.reports <- gi:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeAPI) setCurrent(id int64) {
	f.mu.Lock()
	f.current = id
	f.mu.Unlock()
}

// fakeWeights records the generation applied and the canary weights set.
type fakeWeights struct {
	mu      sync.Mutex
	gen     int64
	weights map[string]int
	applied []int64
}

func (w *fakeWeights) Generation() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen
}

func (w *fakeWeights) SetCanaryWeight(gen int64, service string, cw int) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if gen != w.gen {
		return false, nil
	}
	w.weights[service] = cw
	return true, nil
}

func (w *fakeWeights) apply(_ context.Context, _ *config.Spec, gen int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gen = gen
	w.applied = append(w.applied, gen)
	return nil
}

func (w *fakeWeights) state() (int64, []int64, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gen, append([]int64(nil), w.applied...), w.weights["web"]
}

func waitCond(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestControlPlaneFollowsEvents: the first connect resyncs; the next
// generation is loaded by id; a gap resyncs to the current generation;
// canary events set weights; a silent stream is reconnected and resynced;
// reports carry the applied generation.
func TestControlPlaneFollowsEvents(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{t: t, events: make(chan string, 16), reports: make(chan apiv1.GatewayInstance, 64)}
	api.setCurrent(1)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	w := &fakeWeights{weights: map[string]int{}}
	src := &source.ControlPlane{
		URL: srv.URL, Token: "tok", Instance: apiv1.GatewayInstance{ID: "gw-1", Listen: "127.0.0.1:1"},
		Apply: w.apply, Weights: w, Heartbeat: 20 * time.Millisecond, StreamTimeout: 300 * time.Millisecond,
		Logger: testlog.New(t, nil),
	}
	testrun.Background(t, src.Run)
	waitCond(t, "generation 1 applied", func() bool { g, _, _ := w.state(); return g == 1 })

	api.events <- "event: generation_published\ndata: {\"id\":2}\n\n"
	waitCond(t, "generation 2 applied", func() bool { g, _, _ := w.state(); return g == 2 })
	connects := api.connects.Load()

	// A gap: generation 5 announced, 7 current; the resync applies 7.
	api.setCurrent(7)
	api.events <- "event: generation_published\ndata: {\"id\":5}\n\n"
	waitCond(t, "generation 7 applied", func() bool { g, _, _ := w.state(); return g == 7 })
	if _, applied, _ := w.state(); fmt.Sprint(applied) != "[1 2 7]" {
		t.Errorf("applied %v, want [1 2 7]", applied)
	}
	api.events <- ": ping\n\nevent: canary_promoted\ndata: {\"generation_id\":7,\"service\":\"web\",\"to_weight\":40}\n\n"
	waitCond(t, "canary weight 40", func() bool { _, _, cw := w.state(); return cw == 40 })
	if n := api.connects.Load(); n != connects {
		t.Errorf("%d connects after the gap, want %d (a gap resyncs on the same stream)", n, connects)
	}

	// A silent stream is dropped after StreamTimeout; the reconnect
	// resyncs the transient weight of the generation served.
	api.mu.Lock()
	api.canary = apiv1.CanaryList{Items: []apiv1.CanaryGroup{{Service: "web", GenerationID: 7, Weights: [2]int{80, 20}, Transient: true}}}
	api.mu.Unlock()
	api.silent.Store(true)
	api.events <- "event: canary_rolled_back\ndata: {\"generation_id\":6,\"service\":\"web\",\"to_weight\":0}\n\n" // not served: ignored
	waitCond(t, "a reconnect and canary weight 20", func() bool {
		_, _, cw := w.state()
		return api.connects.Load() >= connects+1 && cw == 20
	})
	waitCond(t, "a report of generation 7", func() bool {
		for {
			select {
			case gi := <-api.reports:
				if gi.ID == "gw-1" && gi.AppliedGeneration == 7 && !gi.LastHeartbeat.IsZero() {
					return true
				}
			default:
				return false
			}
		}
	})
}

// TestControlPlanePeriodicResync: a generation the stream never announces
// (a notification lost somewhere) is still applied at the next resync,
// which the next line of the stream triggers once Resync has passed.
func TestControlPlanePeriodicResync(t *testing.T) {
	t.Parallel()
	api := &fakeAPI{t: t, events: make(chan string, 16), reports: make(chan apiv1.GatewayInstance, 64)}
	api.setCurrent(1)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	w := &fakeWeights{weights: map[string]int{}}
	src := &source.ControlPlane{
		URL: srv.URL, Token: "tok", Instance: apiv1.GatewayInstance{ID: "gw-1"},
		Apply: w.apply, Weights: w, Resync: time.Millisecond, Logger: testlog.New(t, nil),
	}
	testrun.Background(t, src.Run)
	waitCond(t, "generation 1 applied", func() bool { g, _, _ := w.state(); return g == 1 })
	connects := api.connects.Load()
	api.setCurrent(3) // published, never announced
	// Pings, as the API sends them, until the resync has applied it (one
	// ping could be taken by a handler whose stream is already closing).
	waitCond(t, "generation 3 applied", func() bool {
		select {
		case api.events <- ": ping\n\n":
		default:
		}
		g, _, _ := w.state()
		return g == 3
	})
	if n := api.connects.Load(); n != connects {
		t.Errorf("%d connects, want %d: the resync runs on the same stream", n, connects)
	}
}
