package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// Event hub sizing and timing.
const (
	// clientBuffer is how many events a client may lag behind before the
	// hub drops it.
	clientBuffer = 64
	// notifyQueue buffers notifications between the listener (Notify) and
	// the event loop (Run), so the listener never blocks.
	notifyQueue = 1024
	// pingInterval is the period of the ": ping" comments that keep idle
	// streams (and proxies in between) alive.
	pingInterval = 15 * time.Second
	// loadTimeout bounds loading a published generation for its event.
	loadTimeout = 5 * time.Second
)

// event is one server-sent event.
type event struct {
	name string
	data []byte // one line of JSON
}

// subscriber is one connected event-stream client.
type subscriber struct {
	events chan event
	gone   chan struct{} // closed when the hub drops the client
	// why says why it was dropped; set before gone is closed.
	why string
}

// hub fans events out to the connected clients. A client whose buffer is
// full is dropped rather than waited for, so one slow client never delays the
// others. It is safe for concurrent use.
type hub struct {
	mu      sync.Mutex
	clients map[*subscriber]struct{}

	listenOnce sync.Once
	listening  chan struct{} // closed by the first Server.Connected
}

func newHub() *hub {
	return &hub{clients: map[*subscriber]struct{}{}, listening: make(chan struct{})}
}

func (h *hub) subscribe() *subscriber {
	c := &subscriber{events: make(chan event, clientBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	h.clients[c] = struct{}{}
	h.mu.Unlock()
	return c
}

func (h *hub) unsubscribe(c *subscriber) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

// broadcast sends e to every client without blocking; a client that cannot
// take it is dropped (its stream ends and it should reconnect).
func (h *hub) broadcast(e event) (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		select {
		case c.events <- e:
		default:
			delete(h.clients, c)
			c.why = "too slow"
			close(c.gone)
			dropped++
		}
	}
	return dropped
}

// dropAll drops every client: each one's stream ends, and it reconnects
// and resyncs.
func (h *hub) dropAll() (dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.clients {
		delete(h.clients, c)
		c.why = "the listener (re)connected: reconnect and resync"
		close(c.gone)
		dropped++
	}
	return dropped
}

// clientCount is the number of connected clients.
func (h *hub) clientCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// notification is one NOTIFY handed from the listener to Run.
type notification struct {
	channel, payload string
}

// Notify hands one notification of the process's listener to the event
// loop (Run): a generation id on db.NotifyChannel, a gateway instance on
// db.GatewayNotifyChannel, a canary event on db.CanaryNotifyChannel, or a
// cache purge on db.CacheNotifyChannel. It
// never blocks: the notification is queued, and dropped with a warning when
// the queue is full, so a slow event loop never holds up the listener.
// Notifications queued before Run starts are handled once it runs. Safe for
// concurrent use.
func (s *Server) Notify(channel, payload string) {
	select {
	case s.queue <- notification{channel, payload}:
	default:
		s.log.Warn("event hub: queue full, dropping a notification", "channel", channel, "payload", payload)
	}
}

// Connected tells the Server that the listener feeding Notify has
// (re)connected and listens on db.NotifyChannel, db.GatewayNotifyChannel,
// db.CanaryNotifyChannel and db.CacheNotifyChannel: what is published from now on reaches the event
// streams. The process's listener calls it on every (re)connect. What was
// published while the listener was away (or before it first connected)
// reached no stream, so every stream open by then is ended: its client (a
// control-plane gateway, the dashboard) reconnects and resyncs at once
// instead of at its next resync or the next publish. It never blocks and is
// safe for concurrent use.
func (s *Server) Connected() {
	// Drop first, then say listening: a stream opened once listening is
	// closed is never one of those dropped.
	if n := s.hub.dropAll(); n > 0 {
		s.log.Info("event hub: the listener (re)connected; ended the event streams open before, so their clients resync", "streams", n)
	}
	s.hub.listenOnce.Do(func() { close(s.hub.listening) })
}

// Run is the event loop: it turns the notifications handed to Notify into
// generation_published, generation_applied, canary_promoted,
// canary_rolled_back and cache_purged events for every client of GET /api/v1/events, until
// ctx is done. It then ends every open event stream, so a graceful shutdown
// of the HTTP server is not held up by them, and returns nil. Beside it,
// Run writes the audit entries spooled while the database was away
// (drainAudit). Run opens no connection of its own. Run at most once per
// Server; without it the event streams stay silent apart from pings, and
// spooled audit entries stay in memory.
func (s *Server) Run(ctx context.Context) error {
	defer s.closeOnce.Do(func() { close(s.closing) })
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.drainAudit(ctx) })
	if s.gatewayRetention > 0 {
		wg.Go(func() { s.pruneGateways(ctx) })
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-s.queue:
			e, err := s.toEvent(ctx, n)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Warn("event hub: dropping a notification", "channel", n.channel, "payload", n.payload, "err", err)
				}
				continue
			}
			if e.name == "" {
				continue // a notification that is no event
			}
			if dropped := s.hub.broadcast(e); dropped > 0 {
				s.log.Warn("event hub: dropped slow clients", "count", dropped, "event", e.name)
			}
		}
	}
}

// toEvent turns a notification into its event: a published generation is
// loaded without its spec (and sent so); a gateway instance is re-encoded; a
// controller's canary action is re-encoded as canary_promoted or
// canary_rolled_back; a cache purge becomes cache_purged. An operator's
// pause or resume of a canary group, and a wait (hold, hold_reset, gate, breach, breach_reset), is no event: toEvent
// returns an event without a name and no error.
func (s *Server) toEvent(ctx context.Context, n notification) (event, error) {
	switch n.channel {
	case db.NotifyChannel:
		id, err := strconv.ParseInt(n.payload, 10, 64)
		if err != nil {
			return event{}, fmt.Errorf("bad generation id %q", n.payload)
		}
		ctx, cancel := context.WithTimeout(ctx, loadTimeout)
		defer cancel()
		g, err := s.store.Head(ctx, id)
		if err != nil {
			return event{}, fmt.Errorf("load generation %d: %w", id, err)
		}
		data, err := json.Marshal(g)
		return event{name: apiv1.EventGenerationPublished, data: data}, err
	case db.GatewayNotifyChannel:
		var gw apiv1.GatewayInstance
		if err := json.Unmarshal([]byte(n.payload), &gw); err != nil {
			return event{}, fmt.Errorf("decode gateway instance: %w", err)
		}
		data, err := json.Marshal(gw)
		return event{name: apiv1.EventGenerationApplied, data: data}, err
	case db.CanaryNotifyChannel:
		e, err := db.ParseCanaryEvent(n.payload)
		if err != nil {
			return event{}, err
		}
		var name string
		switch e.Action {
		case apiv1.CanaryPromote:
			name = apiv1.EventCanaryPromoted
		case apiv1.CanaryRollback, apiv1.CanarySevereRollback:
			name = apiv1.EventCanaryRolledBack
		case apiv1.CanaryPause, apiv1.CanaryResume, apiv1.CanaryHold, apiv1.CanaryHoldReset, apiv1.CanaryGate,
			apiv1.CanaryBreach, apiv1.CanaryBreachReset, apiv1.CanaryWebhook:
			return event{}, nil
		default:
			return event{}, fmt.Errorf("unknown canary action %q", e.Action)
		}
		data, err := json.Marshal(e)
		return event{name: name, data: data}, err
	case db.CacheNotifyChannel:
		p, err := db.ParseCachePurge(n.payload)
		if err != nil {
			return event{}, err
		}
		data, err := json.Marshal(apiv1.CachePurged{Service: p.Service, PathPrefix: p.PathPrefix, Generation: p.Generation})
		return event{name: apiv1.EventCachePurged, data: data}, err
	}
	return event{}, fmt.Errorf("unknown channel %q", n.channel)
}

// events answers GET /api/v1/events with a server-sent event stream that
// lasts until the client leaves, the server shuts down, or the client falls
// too far behind. It answers once the process's listener has first
// connected: from then on, what is published reaches the stream.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// A stream outlives any write timeout of the server.
	_ = rc.SetWriteDeadline(time.Time{})

	// Until the process's listener first listens, nothing published
	// reaches a stream, and its first connect ends every stream open by
	// then (Connected): a client that connects before that waits here
	// rather than being told it is subscribed, resyncing, and being
	// dropped a moment later (a control-plane gateway purges its caches
	// on each reconnect).
	select {
	case <-s.hub.listening:
	case <-r.Context().Done():
		return
	case <-s.closing:
		return
	}
	c := s.hub.subscribe()
	defer s.hub.unsubscribe(c)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// The first comment tells the client it is subscribed.
	if _, err := fmt.Fprint(w, ": connected\n\n"); err != nil {
		return
	}
	if err := rc.Flush(); err != nil {
		s.log.WarnContext(r.Context(), "event stream cannot flush", "request_id", requestID(r.Context()), "err", err)
		return
	}

	ping := time.NewTicker(s.pingEvery)
	defer ping.Stop()
	for {
		var err error
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-c.gone:
			s.log.InfoContext(r.Context(), "event stream ended by the hub", "why", c.why, "request_id", requestID(r.Context()))
			return
		case e := <-c.events:
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, e.data)
		case <-ping.C:
			_, err = fmt.Fprint(w, ": ping\n\n")
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}
