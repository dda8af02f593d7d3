package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dwara/dwara/db/dbtest"
	"github.com/dwara/dwara/gateway/config/spectest"
)

// benchSpec is a spec of n upstreams of three endpoints each and n
// services, each split 2 ways; service 0 is split w/100-w, so that specs of
// another w are other generations.
func benchSpec(n, w int) *spectest.Builder {
	b := spectest.New()
	for i := range n {
		b.Upstream(fmt.Sprintf("u%d", i), fmt.Sprintf("10.0.%d.1:8080", i), fmt.Sprintf("10.0.%d.2:8080", i), fmt.Sprintf("10.0.%d.3:8080", i))
	}
	for i := range n {
		sw := 90
		if i == 0 {
			sw = w
		}
		b.Split(fmt.Sprintf("s%d", i), fmt.Sprintf("/s%d", i),
			spectest.T(fmt.Sprintf("u%d", i), sw), spectest.T(fmt.Sprintf("u%d", (i+1)%n), 100-sw))
	}
	return b
}

// BenchmarkPublish measures a publish from the API handler to the stored
// row, on the test database: POST /api/v1/generations with a 20-service
// spec (every call a new generation), and POST .../flip (an edit of the
// active generation).
func BenchmarkPublish(b *testing.B) {
	store, _ := dbtest.NewStore(b)
	srv := New(Options{Store: store, Logger: slog.New(slog.DiscardHandler)})
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	client := ts.Client()
	post := func(b *testing.B, path string, body []byte, want int) {
		req, err := http.NewRequest("POST", ts.URL+path, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			b.Fatalf("POST %s: %d %s, want %d", path, resp.StatusCode, got, want)
		}
	}
	var bodies [2][]byte
	for i, w := range []int{90, 10} {
		body, err := json.Marshal(map[string]any{"message": "bench", "spec": benchSpec(20, w)})
		if err != nil {
			b.Fatal(err)
		}
		bodies[i] = body
	}
	i := 0 // across runs of "create" (-count), so every call stores a new generation
	b.Run("create", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, "/api/v1/generations", bodies[i%2], http.StatusCreated)
			i++
		}
	})
	b.Run("flip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, "/api/v1/services/s0/flip", []byte(`{}`), http.StatusCreated)
		}
	})
}
