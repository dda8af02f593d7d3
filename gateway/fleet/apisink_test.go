package fleet

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// TestAPIWindowSink: a flush is one POST /api/v1/canary/windows with the
// token and the rows; a refusal is an error (the Flusher keeps the rows).
func TestAPIWindowSink(t *testing.T) {
	t.Parallel()
	var got apiv1.CanaryWindowReport
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/canary/windows" || r.Header.Get("Authorization") != "Bearer tok" {
			t.Errorf("%s %s with %q", r.Method, r.URL.Path, r.Header.Get("Authorization"))
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	sink := &APIWindowSink{URL: srv.URL + "/", Token: "tok", Client: srv.Client()}
	rows := []db.CanaryWindowRow{
		{Generation: 3, Service: "web", Version: db.VersionBaseline, Requests: 10, Errors: 1, Latency: [][2]uint64{{2, 9}, {5, 1}}},
		{Generation: 3, Service: "web", Version: db.VersionCanary, Requests: 2},
	}
	if err := sink.FlushCanaryWindows(context.Background(), "gw-1", rows); err != nil {
		t.Fatal(err)
	}
	if got.Instance != "gw-1" || len(got.Rows) != 2 || got.Rows[0].GenerationID != 3 || got.Rows[0].Errors != 1 ||
		len(got.Rows[0].Latency) != 2 || got.Rows[1].Version != "canary" || got.Rows[1].Latency == nil {
		t.Errorf("report %+v", got)
	}
	status = http.StatusServiceUnavailable
	if err := sink.FlushCanaryWindows(context.Background(), "gw-1", rows); err == nil {
		t.Error("a 503 was no error")
	}
}
