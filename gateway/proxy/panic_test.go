package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dwara/dwara/internal/testrun"
)

// panicSink is an ExposureSink that panics while armed.
type panicSink struct{ armed atomic.Bool }

func (s *panicSink) Expose(Exposure) {
	if s.armed.Load() {
		panic("exposure sink failed")
	}
}

// panicHandler is a slog.Handler that panics on every record while armed.
type panicHandler struct{ armed *atomic.Bool }

func (h panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h panicHandler) Handle(context.Context, slog.Record) error {
	if h.armed.Load() {
		panic("access log failed")
	}
	return nil
}
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicHandler) WithGroup(string) slog.Handler      { return h }

// TestPanicsAreContained: a panic while a request is served ends that
// request only: the process serves the next one, and no endpoint keeps a
// request in flight. A panic of the operator's exposure sink, while
// routing, ends the request: on the fasthttp front, whose handler writes
// nothing before it returns, with 502 problem+json and the connection
// closed; on the net/http front with the connection closed without an
// answer (net/http's recovery). A panic of the access log's handler, after
// the answer's bookkeeping, loses the line and never the answer.
func TestPanicsAreContained(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, front string) {
		t.Parallel()
		for _, where := range []string{"routing", "access log"} {
			t.Run(where, func(t *testing.T) {
				t.Parallel()
				up := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.WriteString(w, "ok")
				}))
				sink := &panicSink{}
				var logArmed atomic.Bool
				reg := prometheus.NewRegistry()
				o := Options{Metrics: reg, Logger: slog.New(slog.DiscardHandler)}
				if where == "routing" {
					o.Exposures, o.ExposureSampleRate = sink, 1
				} else {
					o.AccessLog = slog.New(panicHandler{armed: &logArmed})
				}
				p := New(o)
				g := &gateway{Proxy: p, URL: serveFront(t, p, front), reg: reg}
				t.Cleanup(p.Close)
				g.apply(t, 1, fmt.Sprintf("upstreams: [{name: a, balancer: least_conn, endpoints: [%q]}]\nservices: [{name: web, upstream: a}]\n", hostOf(up.URL)))

				sink.armed.Store(true)
				logArmed.Store(true)
				for range 3 {
					rc := dialRaw(t, g)
					rc.write(rawHead("GET /x HTTP/1.1", "Host: x"))
					resp, err := http.ReadResponse(rc.br, &http.Request{Method: http.MethodGet})
					switch {
					case where == "routing" && front == "fasthttp":
						if err != nil || resp.StatusCode != http.StatusBadGateway || !resp.Close ||
							resp.Header.Get("Content-Type") != "application/problem+json" {
							t.Fatalf("a request whose routing panicked: %v %v; want 502 problem+json and the connection closed", resp, err)
						}
					case where == "routing":
						if err == nil {
							t.Fatalf("a request whose routing panicked got %d; want the connection closed", resp.StatusCode)
						}
					default: // the access log loses its line, never the answer
						if err != nil || resp.StatusCode != http.StatusOK {
							t.Fatalf("a request whose access log line panicked: %v %v; want its 200", resp, err)
						}
					}
				}
				sink.armed.Store(false)
				logArmed.Store(false)
				resp, body := get(t, client, g.URL+"/x", nil)
				if resp.StatusCode != http.StatusOK || body != "ok" {
					t.Fatalf("after the panics: %d %q; want 200 ok", resp.StatusCode, body)
				}
				if where == "access log" {
					// Counted before the line was logged: the bookkeeping is whole.
					deadline := time.Now().Add(testrun.Timeout)
					for testutil.ToFloat64(g.m.requests.WithLabelValues("web", "a", "200")) < 4 {
						if time.Now().After(deadline) {
							t.Fatalf("requests counted: %v; want 4 answered 200", g.samples(t, "dwara_requests_total"))
						}
						time.Sleep(10 * time.Millisecond) // polling a condition, bounded above
					}
				}
				for _, ep := range g.table.Load().upstreams["a"].endpoints {
					if n := ep.state.Inflight(); n != 0 {
						t.Errorf("endpoint %s: %d in flight after the panics, want 0", ep.Addr, n)
					}
				}
			})
		}
	})
}
