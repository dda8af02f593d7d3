// Package fakeai is a fake OpenAI-compatible upstream for tests and
// demos: POST .../chat/completions and .../completions, streamed
// (server-sent events, one per token, flushed each) or not, and
// .../embeddings, with a configurable latency, time to first token,
// failure rate and 429 rate. Every answer names the model the request
// body asked for, in its "model" field and in the X-Fake-Model header, so
// a test can tell which model a gateway sent it.
package fakeai

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configure a fake upstream. The zero value answers at once,
// never fails, and streams DefaultEvents events.
type Options struct {
	// Name is sent in the X-Fake-Upstream header of every answer.
	Name string
	// Events is the number of content events of a streamed answer (and
	// the completion tokens of every answer); 0 means DefaultEvents.
	Events int
	// TTFT is the wait before the first event of a streamed answer;
	// Delay the wait between two events.
	TTFT, Delay time.Duration
	// Latency is the wait before a non-streamed answer.
	Latency time.Duration
	// FailRate is the share of requests answered 500, RateLimitRate the
	// share answered 429 (drawn from Seed).
	FailRate, RateLimitRate float64
	// Seed seeds the draws of failures.
	Seed uint64
	// Record, when not nil, is given every request and its body as
	// received (before it is answered).
	Record func(r *http.Request, body []byte)
	// Pace, when not nil, is called before each content event of a
	// streamed answer but the first (i from 1), after Delay; the stream
	// ends when it returns false. A test that lets event i go only once
	// its client has read event i-1 shows that each event was flushed
	// on its own, whatever the machine's speed.
	Pace func(r *http.Request, i int) bool
}

// DefaultEvents is Options.Events's default.
const DefaultEvents = 5

// Server is a fake upstream; it is an http.Handler, safe for concurrent
// use.
type Server struct {
	o   Options
	mu  sync.Mutex
	rnd *rand.Rand
}

// New returns a fake upstream.
func New(o Options) *Server {
	if o.Events <= 0 {
		o.Events = DefaultEvents
	}
	return &Server{o: o, rnd: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))}
}

// request is what the fake reads of a body.
type request struct {
	Model         string          `json:"model"`
	Stream        bool            `json:"stream"`
	User          string          `json:"user"`
	Messages      json.RawMessage `json:"messages"`
	Prompt        json.RawMessage `json:"prompt"`
	Input         json.RawMessage `json:"input"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) draw() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Float64()
}

// ServeHTTP answers one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Fake-Upstream", s.o.Name)
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	if s.o.Record != nil {
		s.o.Record(r, body)
	}
	var q request
	if r.Method != http.MethodPost || json.Unmarshal(body, &q) != nil || q.Model == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "a POST with a JSON body naming a model is expected")
		return
	}
	h := w.Header()
	h.Set("X-Fake-Model", q.Model)
	switch x := s.draw(); {
	case x < s.o.RateLimitRate:
		h.Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "rate limit reached for "+q.Model)
		return
	case x < s.o.RateLimitRate+s.o.FailRate:
		writeError(w, http.StatusInternalServerError, "server_error", "the fake failed on purpose")
		return
	}
	prompt := promptTokens(body)
	switch {
	case strings.HasSuffix(r.URL.Path, "/embeddings"):
		s.wait(r, s.o.Latency)
		writeJSON(w, map[string]any{
			"object": "list", "model": q.Model,
			"data":  []any{map[string]any{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
			"usage": map[string]int{"prompt_tokens": prompt, "total_tokens": prompt},
		})
	case strings.HasSuffix(r.URL.Path, "/chat/completions") || strings.HasSuffix(r.URL.Path, "/completions"):
		chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
		if q.Stream {
			s.stream(w, r, q, chat, prompt)
			return
		}
		s.wait(r, s.o.Latency)
		text := strings.Repeat("tok ", s.o.Events)
		choice := map[string]any{"index": 0, "finish_reason": "stop", "text": text}
		object := "text_completion"
		if chat {
			choice = map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]string{"role": "assistant", "content": text}}
			object = "chat.completion"
		}
		writeJSON(w, map[string]any{
			"id": "fake-1", "object": object, "model": q.Model, "choices": []any{choice},
			"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": s.o.Events, "total_tokens": prompt + s.o.Events},
		})
	default:
		writeError(w, http.StatusNotFound, "not_found", "the fake serves chat/completions, completions and embeddings")
	}
}

// stream writes a streamed answer: TTFT, then Events events Delay apart,
// the usage chunk when the client asked for it, and [DONE]; each flushed.
// A client gone ends it.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, q request, chat bool, prompt int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl := http.NewResponseController(w)
	_ = fl.Flush()
	if !s.wait(r, s.o.TTFT) {
		return
	}
	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	for i := range s.o.Events {
		if i > 0 && (!s.wait(r, s.o.Delay) || s.o.Pace != nil && !s.o.Pace(r, i)) {
			return
		}
		choice := map[string]any{"index": 0, "text": fmt.Sprintf("tok%d ", i)}
		if chat {
			choice = map[string]any{"index": 0, "delta": map[string]string{"content": fmt.Sprintf("tok%d ", i)}}
		}
		if !event(w, fl, map[string]any{"id": "fake-1", "object": object, "model": q.Model, "choices": []any{choice}}) {
			return
		}
	}
	if q.StreamOptions != nil && q.StreamOptions.IncludeUsage {
		event(w, fl, map[string]any{"id": "fake-1", "object": object, "model": q.Model, "choices": []any{},
			"usage": map[string]int{"prompt_tokens": prompt, "completion_tokens": s.o.Events, "total_tokens": prompt + s.o.Events}})
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = fl.Flush()
}

// event writes one data: event and flushes it; false when the client is
// gone.
func event(w http.ResponseWriter, fl *http.ResponseController, v any) bool {
	b, _ := json.Marshal(v)
	if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
		return false
	}
	return fl.Flush() == nil
}

// wait waits d, or less when the client goes away (false).
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return r.Context().Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// promptTokens is the fake's token count of a body: its words, roughly.
func promptTokens(body []byte) int {
	return len(strings.Fields(string(body)))
}

func writeJSON(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
