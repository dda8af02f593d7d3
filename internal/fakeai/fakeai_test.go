package fakeai

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dwara/dwara/internal/teststat"
)

func do(t *testing.T, s *Server, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return w
}

// A chat completion names the model it was sent, in its body and header,
// and counts its usage.
func TestChat(t *testing.T) {
	t.Parallel()
	w := do(t, New(Options{Name: "a", Events: 3}), "/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`)
	var got struct {
		Model string `json:"model"`
		Usage struct {
			Completion int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != 200 || got.Model != "gpt-4o" || got.Usage.Completion != 3 ||
		w.Header().Get("X-Fake-Model") != "gpt-4o" || w.Header().Get("X-Fake-Upstream") != "a" {
		t.Errorf("%d %s %+v", w.Code, w.Body, got)
	}
}

// A stream has Events content events, the usage chunk when asked, and
// [DONE].
func TestStream(t *testing.T) {
	t.Parallel()
	w := do(t, New(Options{Events: 4}), "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	var events []string
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		if l, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			events = append(events, l)
		}
	}
	if len(events) != 6 || !strings.Contains(events[4], `"usage":{`) || events[5] != "[DONE]" || w.Header().Get("Content-Type") != "text/event-stream" {
		t.Errorf("events %q", events)
	}
}

// The failure and 429 rates are drawn from the seed: 1,000 requests
// split 50/30/20 within a chi-square at p = 0.001.
func TestRates(t *testing.T) {
	t.Parallel()
	s := New(Options{FailRate: 0.2, RateLimitRate: 0.3, Seed: 7})
	codes := map[int]int{}
	for range 1000 {
		codes[do(t, s, "/v1/embeddings", `{"model":"e","input":"x"}`).Code]++
	}
	obs := []int{codes[200], codes[429], codes[500]}
	if chi := teststat.ChiSquare(obs, []int{50, 30, 20}); chi > teststat.Critical001[2] || obs[0]+obs[1]+obs[2] != 1000 {
		t.Errorf("codes %v of 1000 at 30%% 429 and 20%% 500: chi-square %.2f > %.3f", codes, chi, teststat.Critical001[2])
	}
}
