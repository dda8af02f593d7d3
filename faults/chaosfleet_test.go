package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The chaos run's process kinds.
const (
	kindServe        = "serve"
	kindReplica      = "database replica"
	kindControlPlane = "control-plane replica"
)

// readyWithin bounds the wait for a (re)started process to apply a
// generation; a process that takes longer fails the run (a hang, not a
// slow start: the figures give the real times).
const readyWithin = time.Minute

// termWithin bounds the wait for a process to exit after SIGTERM: its
// --shutdown-timeout (10 s) and a margin.
const termWithin = 30 * time.Second

// member is one dwara process of the chaos fleet, run from the binary and
// restarted on the same addresses (and state directory) after each stop.
// The harness marks it down before it signals the process and up once the
// process applied a generation; requests are judged by that state.
type member struct {
	t       *testing.T
	name    string
	kind    string
	bin     string
	args    []string
	proxy   string                // the proxy listener
	applied func() (int64, error) // the generation its proxy applied, 0 for none

	mu       sync.Mutex
	c        *child
	up       bool
	epoch    int          // incremented by every stop
	graceful map[int]bool // epoch -> the stop that began it was a SIGTERM
	starts   int
	started  time.Time       // when the process started last
	ready    []time.Duration // from each start to its first applied generation
}

func newMember(t *testing.T, name, kind, bin, proxy string, applied func() (int64, error), args ...string) *member {
	return &member{t: t, name: name, kind: kind, bin: bin, args: args, proxy: proxy, applied: applied, graceful: map[int]bool{}}
}

// launch starts the process and waits until its proxy applied a
// generation; then the member is up. It returns how long that took.
func (m *member) launch() time.Duration {
	m.t.Helper()
	m.start()
	return m.awaitReady()
}

// start starts the process.
func (m *member) start() {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.starts++
	m.c = startChild(m.t, fmt.Sprintf("%s (start %d)", m.name, m.starts), m.bin, m.args...)
	m.started = time.Now()
}

// awaitReady waits until the process started last applied a generation,
// marks the member up and returns how long that took from its start.
func (m *member) awaitReady() time.Duration {
	m.t.Helper()
	m.mu.Lock()
	c, t0 := m.c, m.started
	m.mu.Unlock()
	_, err := c.await(readyWithin, func() bool {
		g, err := m.applied()
		return err == nil && g > 0
	})
	took := time.Since(t0)
	if err != nil {
		m.t.Fatalf("%s applied no generation after its start %d: %v", m.name, m.starts, err)
	}
	m.mu.Lock()
	m.up = true
	m.ready = append(m.ready, took)
	m.mu.Unlock()
	return took
}

// stop marks the member down, then sends sig and waits for the process to
// exit. A SIGTERM must end in a clean exit within termWithin.
func (m *member) stop(sig syscall.Signal) {
	m.t.Helper()
	m.mu.Lock()
	m.up = false
	m.epoch++
	m.graceful[m.epoch] = sig == syscall.SIGTERM
	c := m.c
	m.mu.Unlock()
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(termWithin):
		c.kill()
		m.t.Errorf("%s did not exit within %v of %v; killed", m.name, termWithin, sig)
		return
	}
	if sig == syscall.SIGTERM && c.err != nil {
		m.t.Errorf("%s exited with %v after SIGTERM, want a clean exit", m.name, c.err)
	}
}

// begin returns the member's state as a request to it starts.
func (m *member) begin() (epoch int, up bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, m.up
}

// counts reports whether a request that began in state (epoch, up) and
// ended with err is judged: it was sent while the member was up, and the
// member was not stopped before it ended, or was stopped gracefully
// (SIGTERM: what it accepted must be answered) and the request was not
// refused (a refused connection carried nothing). Every other request went
// to a down proxy.
func (m *member) counts(epoch int, up bool, err error) bool {
	if !up {
		return false
	}
	m.mu.Lock()
	now, graceful := m.epoch, m.graceful[epoch+1]
	m.mu.Unlock()
	switch {
	case now == epoch:
		return true
	case now == epoch+1 && graceful:
		return !isRefused(err)
	default:
		return false
	}
}

// phase says where the member stands, for the log: stopped, or started
// how long ago and whether it is up.
func (m *member) phase() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.c == nil:
		return "not started"
	case m.up:
		return fmt.Sprintf("up, started %v ago", time.Since(m.started).Round(time.Millisecond))
	}
	select {
	case <-m.c.done:
		return "stopped"
	default:
		return fmt.Sprintf("started %v ago, not up yet, or stopping", time.Since(m.started).Round(time.Millisecond))
	}
}

// readyFigures returns how long the first start took to apply a
// generation, the longest any restart took, and the number of starts.
func (m *member) readyFigures() (first, maxRestart time.Duration, starts int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, d := range m.ready {
		if i == 0 {
			first = d
		} else {
			maxRestart = max(maxRestart, d)
		}
	}
	return first, maxRestart, m.starts
}

// healthGeneration reads the generation a gateway's proxy applied from its
// metrics listener's /healthz.
func healthGeneration(metrics string) func() (int64, error) {
	return func() (int64, error) {
		a := callAPI(http.MethodGet, "http://"+metrics+"/healthz", nil)
		if a.err != nil {
			return 0, a.err
		}
		if a.status != http.StatusOK {
			return 0, fmt.Errorf("GET /healthz: %s", a)
		}
		var h struct {
			Generation int64 `json:"generation"`
		}
		if err := json.Unmarshal(a.body, &h); err != nil {
			return 0, fmt.Errorf("GET /healthz: %s: %w", a.body, err)
		}
		return h.Generation, nil
	}
}

// metricGeneration reads the generation serve's proxy applied from
// dwara_generation_active on its admin listener's /metrics.
func metricGeneration(admin string) func() (int64, error) {
	return func() (int64, error) {
		resp, err := apiClient.Get("http://" + admin + "/metrics")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
		}
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, "dwara_generation_active "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return int64(f), err
			}
		}
		return 0, errors.New("no dwara_generation_active in /metrics")
	}
}
