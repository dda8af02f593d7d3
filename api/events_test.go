package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
	"github.com/dwara/dwara/internal/testlog"
	"github.com/dwara/dwara/internal/testrun"
)

// sseReader reads server-sent events from a stream.
type sseReader struct {
	r *bufio.Reader
}

// next returns the next event, skipping comments; io.EOF when the stream
// ends.
func (s *sseReader) next() (name, data string, err error) {
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// runEvents runs e's event loop and a db.Listener that feeds it, as the
// process's one listener does, until the test ends; it returns once the
// listener listens, and a func that stops the event loop (not the
// listener) and waits for it.
func runEvents(t *testing.T, e *env) (stopRun func()) {
	t.Helper()
	l := &db.Listener{
		ConnString: e.store.ConnString(),
		Channels:   []string{db.NotifyChannel, db.GatewayNotifyChannel, db.CanaryNotifyChannel},
		OnConnect: func(context.Context) error {
			e.srv.Connected()
			return nil
		},
		OnNotify: e.srv.Notify,
		Logger:   slog.New(slog.DiscardHandler),
	}
	testrun.Background(t, l.Run)
	stopRun = testrun.Background(t, e.srv.Run)
	select {
	case <-e.srv.hub.listening:
	case <-time.After(testrun.Timeout):
		t.Fatalf("the listener did not connect within %v", testrun.Timeout)
	}
	return stopRun
}

func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	stopRun := runEvents(t, e)

	ctx, cancel := context.WithTimeout(t.Context(), testrun.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	stream := &sseReader{r: bufio.NewReader(resp.Body)}
	// The first comment says the stream is subscribed.
	if line, err := stream.r.ReadString('\n'); err != nil || line != ": connected\n" {
		t.Fatalf("first line %q, %v", line, err)
	}

	g := e.publish(specWith(95, 5), "watched")
	name, data, err := stream.next()
	if err != nil {
		t.Fatalf("waiting for generation_published: %v", err)
	}
	if name != apiv1.EventGenerationPublished {
		t.Fatalf("event %q, want %s", name, apiv1.EventGenerationPublished)
	}
	var got apiv1.Generation
	if err := json.Unmarshal([]byte(data), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != g.ID || got.Message != "watched" || got.Spec != nil || strings.Contains(data, `"spec"`) {
		t.Errorf("published event data %s, want generation %d without spec", data, g.ID)
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	err = e.store.UpsertGateway(ctx, apiv1.GatewayInstance{
		ID: "gw-1", Hostname: "edge-1", Listen: "127.0.0.1:8080",
		AppliedGeneration: g.ID, AppliedAt: now, StartedAt: now, LastHeartbeat: now,
		Endpoints: []apiv1.EndpointState{{Upstream: "api-stable", Endpoint: "127.0.0.1:9001", Up: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	name, data, err = stream.next()
	if err != nil || name != apiv1.EventGenerationApplied {
		t.Fatalf("event %q, %v; want %s", name, err, apiv1.EventGenerationApplied)
	}
	var gw apiv1.GatewayInstance
	if err := json.Unmarshal([]byte(data), &gw); err != nil {
		t.Fatal(err)
	}
	if gw.ID != "gw-1" || gw.AppliedGeneration != g.ID || len(gw.Endpoints) != 1 || !gw.Endpoints[0].Up {
		t.Errorf("applied event data %s", data)
	}
	var gws apiv1.GatewayList
	e.do(call{method: "GET", path: "/api/v1/gateways"}).want(t, http.StatusOK).decode(t, &gws)
	if len(gws.Items) != 1 || gws.Items[0].ID != "gw-1" || gws.Items[0].AppliedGeneration != g.ID {
		t.Errorf("gateways = %+v", gws)
	}

	// Stopping the hub ends the stream, so a graceful shutdown is not held up.
	stopRun()
	if _, _, err := stream.next(); !errors.Is(err, io.EOF) {
		t.Errorf("after Run stopped the stream ended with %v, want EOF", err)
	}
}

// TestEventStreamBeforeTheListener: a stream opened before the process's
// listener first connects is answered once it has connected, and is not
// ended by that connect: the next publish reaches it. (A stream told it
// was subscribed before that connect was dropped by it, and a
// control-plane gateway purged its caches a second time on reconnecting.)
func TestEventStreamBeforeTheListener(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), testrun.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan *http.Response, 1)
	go func() {
		resp, err := e.client.Do(req)
		if err != nil {
			t.Errorf("GET /api/v1/events: %v", err)
			close(answered)
			return
		}
		answered <- resp
	}()
	// Time for the request to reach the handler before the listener
	// connects (without it the test passes either way).
	time.Sleep(200 * time.Millisecond)
	select {
	case resp := <-answered:
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatal("the event stream was answered before the listener connected")
	default:
	}
	runEvents(t, e)
	resp := <-answered
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	stream := &sseReader{r: bufio.NewReader(resp.Body)}
	if line, err := stream.r.ReadString('\n'); err != nil || line != ": connected\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	g := e.publish(specWith(95, 5), "after the connect")
	name, data, err := stream.next()
	if err != nil || name != apiv1.EventGenerationPublished || !strings.Contains(data, fmt.Sprintf(`"id":%d`, g.ID)) {
		t.Fatalf("next event %q %s, %v; want generation_published of %d on the same stream", name, data, err, g.ID)
	}
}

// The controller's actions are events; an operator's pause and resume are
// not.
func TestCanaryEventStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	runEvents(t, e)

	ctx, cancel := context.WithTimeout(t.Context(), testrun.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	stream := &sseReader{r: bufio.NewReader(resp.Body)}
	if line, err := stream.r.ReadString('\n'); err != nil || line != ": connected\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	g := e.publish(canarySpec(95, 5), "")
	if name, _, err := stream.next(); err != nil || name != apiv1.EventGenerationPublished {
		t.Fatalf("event %q, %v; want %s", name, err, apiv1.EventGenerationPublished)
	}

	c := e.newController()
	steps := []struct {
		act  func() apiv1.CanaryEvent // nil: a pause or resume, no event
		hold func()
		name string
	}{
		{hold: func() { e.do(call{method: "POST", path: "/api/v1/services/api/canary/pause"}).want(t, http.StatusOK) }},
		{hold: func() { e.do(call{method: "POST", path: "/api/v1/services/api/canary/resume"}).want(t, http.StatusOK) }},
		{act: func() apiv1.CanaryEvent { return c.act(g.ID, "api", apiv1.CanaryPromote, 5, 10, 5) }, name: apiv1.EventCanaryPromoted},
		{act: func() apiv1.CanaryEvent { return c.act(g.ID, "api", apiv1.CanaryRollback, 10, 5, 5) }, name: apiv1.EventCanaryRolledBack},
		{hold: func() { e.do(call{method: "POST", path: "/api/v1/services/api/canary/pause"}).want(t, http.StatusOK) }},
		{act: func() apiv1.CanaryEvent { return c.act(g.ID, "api", apiv1.CanarySevereRollback, 5, 0, 5) }, name: apiv1.EventCanaryRolledBack},
	}
	for i, st := range steps {
		if st.hold != nil {
			st.hold()
			continue
		}
		want := st.act()
		// Events arrive in order, so the next one is this action's: the
		// holds before it sent none.
		name, data, err := stream.next()
		if err != nil || name != st.name {
			t.Fatalf("step %d: event %q, %v; want %s", i, name, err, st.name)
		}
		var got apiv1.CanaryEvent
		if err := json.Unmarshal([]byte(data), &got); err != nil {
			t.Fatal(err)
		}
		if got.ID != want.ID || got.Action != want.Action || got.FromWeight != want.FromWeight || got.ToWeight != want.ToWeight ||
			got.Canary == nil || got.PValue == nil || !got.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("step %d: event data %s, want %+v", i, data, want)
		}
	}
}

func TestCanaryNotificationsThatAreNoEvent(t *testing.T) {
	t.Parallel()
	s := New(Options{Store: &db.Store{}})
	for _, tt := range []struct {
		payload string
		bad     bool
	}{
		{`{"id": 1, "generation_id": 1, "service": "api", "action": "pause"}`, false},
		{`{"id": 2, "generation_id": 1, "service": "api", "action": "resume"}`, false},
		{`{"id": 3, "generation_id": 1, "service": "api", "action": "launch"}`, true},
		{`{"id": 4, "service": "api", "action": "promote"}`, true},
		{`not json`, true},
	} {
		ev, err := s.toEvent(t.Context(), notification{db.CanaryNotifyChannel, tt.payload})
		if tt.bad && err == nil || !tt.bad && err != nil || ev.name != "" {
			t.Errorf("%s: event %q, %v; want no event and an error: %t", tt.payload, ev.name, err, tt.bad)
		}
	}
}

// Notify never blocks the listener: past the queue's capacity, with no
// event loop draining it, notifications are dropped with a warning; the
// queued ones become events once Run starts.
func TestNotifyDropsWhenFull(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	e := newEnv(t, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const extra = 3
	for range notifyQueue + extra {
		e.srv.Notify("unknown", "x")
	}
	if n := strings.Count(logs.String(), "queue full, dropping a notification"); n != extra {
		t.Errorf("%d notifications dropped with a warning, want %d", n, extra)
	}
	if n := len(e.srv.queue); n != notifyQueue {
		t.Errorf("%d notifications queued, want %d", n, notifyQueue)
	}
}

func TestGatewaysEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	r := e.do(call{method: "GET", path: "/api/v1/gateways"}).want(t, http.StatusOK)
	if strings.TrimSpace(string(r.body)) != `{"items":[]}` {
		t.Errorf("body %s", r.body)
	}
}

// A client that does not keep up is dropped; the others still get every
// event.
func TestHubDropsSlowClients(t *testing.T) {
	t.Parallel()
	h := newHub()
	slow, fast := h.subscribe(), h.subscribe()
	for i := range clientBuffer + 1 {
		if dropped := h.broadcast(event{name: "e", data: []byte{byte(i)}}); i < clientBuffer && dropped != 0 {
			t.Fatalf("event %d dropped %d clients", i, dropped)
		}
		if i < clientBuffer { // fast keeps up, slow never reads
			<-fast.events
		}
	}
	select {
	case <-slow.gone:
	default:
		t.Fatal("the slow client was not dropped")
	}
	select {
	case <-fast.gone:
		t.Fatal("the fast client was dropped")
	case e := <-fast.events:
		if e.data[0] != clientBuffer {
			t.Errorf("fast client got event %d, want %d", e.data[0], clientBuffer)
		}
	}
	if n := h.clientCount(); n != 1 {
		t.Errorf("%d clients left, want 1", n)
	}
	h.unsubscribe(fast)
	if n := h.clientCount(); n != 0 {
		t.Errorf("%d clients left, want 0", n)
	}
}
