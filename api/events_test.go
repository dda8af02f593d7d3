package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/db"
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

func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Options{})
	runCtx, stopRun := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- e.srv.Run(runCtx) }()
	t.Cleanup(func() {
		stopRun()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-e.srv.hub.listening:
	case <-time.After(20 * time.Second):
		t.Fatal("the event hub did not start listening")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
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
	if name != EventGenerationPublished {
		t.Fatalf("event %q, want %s", name, EventGenerationPublished)
	}
	var got db.Generation
	if err := json.Unmarshal([]byte(data), &got); err != nil {
		t.Fatal(err)
	}
	if got.ID != g.ID || got.Message != "watched" || got.Spec != nil || strings.Contains(data, `"spec"`) {
		t.Errorf("published event data %s, want generation %d without spec", data, g.ID)
	}

	now := time.Now().UTC().Truncate(time.Millisecond)
	err = e.store.UpsertGateway(ctx, db.GatewayInstance{
		ID: "gw-1", Hostname: "edge-1", Listen: "127.0.0.1:8080",
		AppliedGeneration: g.ID, AppliedAt: now, StartedAt: now, LastHeartbeat: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	name, data, err = stream.next()
	if err != nil || name != EventGenerationApplied {
		t.Fatalf("event %q, %v; want %s", name, err, EventGenerationApplied)
	}
	var gw db.GatewayInstance
	if err := json.Unmarshal([]byte(data), &gw); err != nil {
		t.Fatal(err)
	}
	if gw.ID != "gw-1" || gw.AppliedGeneration != g.ID {
		t.Errorf("applied event data %s", data)
	}
	var gws GatewayList
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
