package source

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/gateway/config"
)

// ControlPlane defaults.
const (
	// DefaultStreamTimeout is how long the event stream may stay silent
	// before it is taken for dead and reconnected: three of the API's
	// pings (one every 15s).
	DefaultStreamTimeout = 45 * time.Second
	// DefaultControlPlaneResync is ControlPlane.Resync's default.
	DefaultControlPlaneResync = 30 * time.Second
	// callTimeout bounds one call to the API other than the stream.
	callTimeout = 15 * time.Second
	// maxEventBytes caps one line of the event stream and one answer.
	maxEventBytes = 16 << 20
	// failureLogEvery rate-limits the warnings of reports that keep
	// failing.
	failureLogEvery = time.Minute
)

// CanaryWeights is what a ControlPlane changes of the canary groups of a
// data plane (a *proxy.Proxy).
type CanaryWeights interface {
	// Generation returns the generation being served, 0 for none.
	Generation() int64
	// SetCanaryWeight sets the canary weight in force of service's group
	// in generation; false when generation is not the one served.
	SetCanaryWeight(generation int64, service string, canaryWeight int) (bool, error)
}

// Caches is what a ControlPlane purges of a data plane's response caches
// (a *proxy.Proxy).
type Caches interface {
	// PurgeCache empties service's cache, or its entries whose path
	// starts with pathPrefix when that is not "".
	PurgeCache(service, pathPrefix string) (removed int, found bool)
	// PurgeAllCaches empties every service's cache.
	PurgeAllCaches() (removed int)
}

// ControlPlane keeps a data plane on the newest generation of the API of
// `dwara serve` at URL (`dwara gateway --control-plane`), with no database
// credentials: it follows GET /api/v1/events and reports through the API.
//
// On every (re)connect of the event stream, once the API said ": connected",
// it resyncs: it loads the current generation (GET
// /api/v1/generations/current) and applies it when it is newer than the one
// served, with the canary controller's transient weights of that generation
// (GET /api/v1/canary) overlaid, then sets the transient weights of the
// generation served. A generation_published event for the generation right
// after the one applied loads that generation (GET /api/v1/generations/{id})
// and applies it; one further ahead (events were missed) resyncs.
// canary_promoted and canary_rolled_back set the group's canary weight;
// cache_purged purges the service's cache (Caches), and every reconnect
// purges every cache, since a purge may have been missed meanwhile.
// A stream that fails, ends, or stays silent for StreamTimeout is
// reconnected with jittered backoff (100ms doubling to 5s); meanwhile the
// data plane keeps serving the generation it applied last.
//
// After each apply and every Heartbeat it reports Instance with PUT
// /api/v1/gateways/{id}; a failed report is logged (at most once a minute
// while they keep failing) and retried at the next heartbeat.
//
// Set the fields before Run; Run must be called at most once. Applied is
// safe for concurrent use.
type ControlPlane struct {
	// URL is the base URL of the API (serve's admin listener), e.g.
	// "http://10.0.0.5:9090". Required.
	URL string
	// Token, when not "", is sent as "Authorization: Bearer <token>" on
	// every call; the reports need the admin token.
	Token string
	// Instance identifies this data plane: the caller sets ID, Hostname,
	// Listen and StartedAt; the ControlPlane fills in the rest. An empty ID
	// reports nothing.
	Instance apiv1.GatewayInstance
	// Apply switches the data plane to a generation. Required.
	Apply ApplyFunc
	// Weights is the data plane's canary side. Required.
	Weights CanaryWeights
	// Endpoints, when non-nil, returns the states of the endpoints the data
	// plane serves, reported with the instance. It must be safe for
	// concurrent use.
	Endpoints func() []apiv1.EndpointState
	// Caches, when non-nil, is the data plane's response cache: a
	// cache_purged event purges the service it names, and every
	// (re)connect of the event stream purges them all, for a purge sent
	// while the stream was down was missed.
	Caches Caches
	// Heartbeat is the time between reports; 0 means 5s.
	Heartbeat time.Duration
	// StreamTimeout is the longest the event stream may stay silent; 0
	// means DefaultStreamTimeout.
	StreamTimeout time.Duration
	// Resync is the time after which the next line of the stream (the
	// API pings every 15 s) also loads the current generation and the
	// weights in force, a safety net as source.Database's; 0 means
	// DefaultControlPlaneResync.
	Resync time.Duration
	// Client makes every call, the event stream included, so it must have
	// no Timeout (each call but the stream is bounded on its own); nil
	// means a client of its own, whose idle connections Run closes when it
	// returns.
	Client *http.Client
	// Logger receives apply, stream and report errors; nil means
	// slog.Default().
	Logger *slog.Logger

	base    string
	log     *slog.Logger
	applied atomic.Int64
	streams atomic.Int64  // event streams connected
	report  chan struct{} // capacity 1
	mu      sync.Mutex    // guards inst
	inst    apiv1.GatewayInstance
}

// Applied returns the id of the last generation applied, 0 when none.
func (s *ControlPlane) Applied() int64 {
	return s.applied.Load()
}

// Run follows the API until ctx is done, then returns nil. It returns an
// error at once only when the ControlPlane is misconfigured.
func (s *ControlPlane) Run(ctx context.Context) error {
	if s.Apply == nil || s.Weights == nil {
		return errors.New("control-plane source: Apply and Weights are required")
	}
	u, err := url.Parse(s.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("control-plane source: %q is not an http(s) URL", s.URL)
	}
	s.base = strings.TrimSuffix(s.URL, "/")
	s.log = s.Logger
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		s.Client = &http.Client{Transport: tr}
	}
	s.inst = s.Instance
	s.report = make(chan struct{}, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.reports(ctx) })

	backoff := minBackoff
	down := false
	for {
		synced, err := s.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if synced {
			backoff, down = minBackoff, false
		}
		wait := jitter(backoff)
		backoff = min(2*backoff, maxBackoff)
		if !down {
			s.log.Warn("control plane: event stream lost; reconnecting, serving the last generation meanwhile",
				"url", s.base, "err", err, "retry_in", wait)
			down = true
		} else {
			s.log.Debug("control plane: still unreachable", "err", err, "retry_in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// follow reads the event stream once, from connect to failure. synced
// reports that it resynced after connecting.
func (s *ControlPlane) follow(ctx context.Context) (synced bool, err error) {
	timeout := orDefault(s.StreamTimeout, DefaultStreamTimeout)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.AfterFunc(timeout, cancel)
	defer deadline.Stop()

	req, err := s.request(sctx, http.MethodGet, "/api/v1/events", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := s.Client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, answerError(req, resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var name string
	var data []byte
	resyncEvery := orDefault(s.Resync, DefaultControlPlaneResync)
	var lastSync time.Time
	for sc.Scan() {
		deadline.Stop() // handling may take calls of their own
		line := sc.Text()
		if synced && time.Since(lastSync) >= resyncEvery {
			if err := s.resync(ctx); err != nil {
				return synced, fmt.Errorf("resync: %w", err)
			}
			lastSync = time.Now()
		}
		switch {
		case line == "":
			if name != "" {
				if err := s.handle(ctx, name, data); err != nil {
					return synced, err
				}
			}
			name, data = "", nil
		case strings.HasPrefix(line, ":"):
			if !synced && strings.TrimSpace(line[1:]) == "connected" {
				s.purgeAll()
				if err := s.resync(ctx); err != nil {
					return false, fmt.Errorf("resync: %w", err)
				}
				synced, lastSync = true, time.Now()
			}
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				if data != nil {
					data = append(data, '\n')
				}
				data = append(data, value...)
			}
		}
		deadline.Reset(timeout)
	}
	switch {
	case sc.Err() != nil && sctx.Err() != nil && ctx.Err() == nil:
		return synced, fmt.Errorf("event stream silent for %v", timeout)
	case sc.Err() != nil:
		return synced, sc.Err()
	}
	return synced, errors.New("event stream ended")
}

// handle acts on one event. An error (a load that failed) ends the stream,
// which reconnects and resyncs.
func (s *ControlPlane) handle(ctx context.Context, name string, data []byte) error {
	switch name {
	case apiv1.EventGenerationPublished:
		var g apiv1.Generation
		if err := json.Unmarshal(data, &g); err != nil {
			return fmt.Errorf("decode %s event: %w", name, err)
		}
		served := s.served()
		switch {
		case g.ID <= served:
			return nil
		case g.ID > served+1:
			return s.resync(ctx) // a gap: events were missed
		}
		var full apiv1.Generation
		if _, err := s.call(ctx, http.MethodGet, "/api/v1/generations/"+strconv.FormatInt(g.ID, 10), nil, &full); err != nil {
			return err
		}
		s.apply(ctx, full, nil)
	case apiv1.EventCachePurged:
		var p apiv1.CachePurged
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("decode %s event: %w", name, err)
		}
		if s.Caches != nil {
			n, found := s.Caches.PurgeCache(p.Service, p.PathPrefix)
			s.log.Info("control plane: cache purged", "service", p.Service, "path_prefix", p.PathPrefix, "removed", n, "served", found)
		}
	case apiv1.EventCanaryPromoted, apiv1.EventCanaryRolledBack:
		var e apiv1.CanaryEvent
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("decode %s event: %w", name, err)
		}
		if _, err := s.Weights.SetCanaryWeight(e.GenerationID, e.Service, e.ToWeight); err != nil {
			s.log.Error("control plane: canary weight not set", "generation", e.GenerationID, "service", e.Service, "weight", e.ToWeight, "err", err)
		}
	}
	return nil
}

// purgeAll empties every cache of the data plane on a (re)connect of the
// event stream: cache_purged events sent while it was down were missed.
// The first connect of the process purges too, which costs nothing.
func (s *ControlPlane) purgeAll() {
	if s.Caches == nil {
		return
	}
	first := s.streams.Add(1) == 1
	if n := s.Caches.PurgeAllCaches(); n > 0 || !first {
		s.log.Info("control plane: event stream (re)connected; purged every response cache, for purges may have been missed meanwhile", "removed", n)
	}
}

// resync applies the current generation when it is newer than the one
// served, then sets the transient weights of the one served.
func (s *ControlPlane) resync(ctx context.Context) error {
	var g apiv1.Generation
	status, err := s.call(ctx, http.MethodGet, "/api/v1/generations/current", nil, &g)
	if status == http.StatusNotFound {
		s.kickReport()
		return nil // nothing published yet
	}
	if err != nil {
		return err
	}
	var canary apiv1.CanaryList
	if _, err := s.call(ctx, http.MethodGet, "/api/v1/canary", nil, &canary); err != nil {
		return err
	}
	if g.ID > s.served() {
		s.apply(ctx, g, canary.Items)
	}
	gen := s.Weights.Generation()
	for _, c := range canary.Items {
		if c.GenerationID != gen || !c.Transient {
			continue
		}
		if _, err := s.Weights.SetCanaryWeight(gen, c.Service, c.Weights[1]); err != nil {
			s.log.Error("control plane: canary weight not set", "generation", gen, "service", c.Service, "weight", c.Weights[1], "err", err)
		}
	}
	s.kickReport()
	return nil
}

// apply decodes g's spec, overlays the transient weights in groups of g,
// and applies it. A refusal is logged; the generation is tried again at
// the next resync.
func (s *ControlPlane) apply(ctx context.Context, g apiv1.Generation, groups []apiv1.CanaryGroup) {
	spec, err := config.ParseAs(g.Spec, config.FormatJSON)
	if err == nil {
		for _, c := range groups {
			if c.GenerationID != g.ID || !c.Transient {
				continue
			}
			spec, err = config.SetWeights(spec, c.Service, map[string]int{c.Baseline: c.Weights[0], c.Canary: c.Weights[1]}, false)
			if err != nil {
				err = fmt.Errorf("overlay canary weights of %q: %w", c.Service, err)
				break
			}
		}
	}
	if err == nil {
		err = s.Apply(ctx, spec, g.ID)
	}
	if err != nil {
		s.log.Error("apply generation failed", "generation", g.ID, "err", err)
		return
	}
	s.applied.Store(g.ID)
	s.mu.Lock()
	s.inst.AppliedGeneration = g.ID
	s.inst.AppliedAt = time.Now().UTC()
	s.mu.Unlock()
	s.kickReport()
}

// served is the newest generation applied, by this source or as the data
// plane says.
func (s *ControlPlane) served() int64 {
	return max(s.applied.Load(), s.Weights.Generation())
}

func (s *ControlPlane) kickReport() {
	select {
	case s.report <- struct{}{}:
	default:
	}
}

// reports reports the instance after each apply and every Heartbeat until
// ctx is done.
func (s *ControlPlane) reports(ctx context.Context) {
	if s.Instance.ID == "" {
		return
	}
	tick := time.NewTicker(orDefault(s.Heartbeat, defaultHeartbeat))
	defer tick.Stop()
	failing := false
	var logged time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.report:
		}
		s.mu.Lock()
		inst := s.inst
		s.mu.Unlock()
		inst.LastHeartbeat = time.Now().UTC()
		inst.Endpoints = nil
		if s.Endpoints != nil {
			inst.Endpoints = s.Endpoints()
		}
		_, err := s.call(ctx, http.MethodPut, "/api/v1/gateways/"+url.PathEscape(inst.ID), inst, nil)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if !failing || time.Since(logged) >= failureLogEvery {
				s.log.Warn("report to the control plane failed; retrying at every heartbeat", "instance", inst.ID, "err", err)
				logged = time.Now()
			}
			failing = true
		case failing:
			s.log.Info("report to the control plane succeeded again", "instance", inst.ID)
			failing = false
		}
	}
}

// request returns a request to the API with the token.
func (s *ControlPlane) request(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", "dwara-gateway")
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	return req, nil
}

// call makes one call within callTimeout: in (nil for none) as JSON, a 2xx
// answer decoded into out (nil: ignored). It returns the status (0 when
// none came) and an error for anything but a 2xx.
func (s *ControlPlane) call(ctx context.Context, method, path string, in, out any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		js, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(js)
	}
	req, err := s.request(ctx, method, path, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, answerError(req, resp)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxEventBytes))
		return resp.StatusCode, nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxEventBytes))
	if err == nil {
		err = json.Unmarshal(data, out)
	}
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: %w", req.Method, req.URL, err)
	}
	return resp.StatusCode, nil
}

// answerError describes a non-2xx answer with the start of its body.
func answerError(req *http.Request, resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s %s: %s: %s", req.Method, req.URL, resp.Status, bytes.TrimSpace(data))
}
