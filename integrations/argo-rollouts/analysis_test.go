package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/argoproj/argo-rollouts/metricproviders/webmetric"
	"github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	log "github.com/sirupsen/logrus"
)

// An Argo Rollouts AnalysisTemplate's web metric, run by Argo Rollouts'
// own web provider, judges a canary by Dwara's fleet-wide window (GET
// /api/v1/canary) with no Prometheus in between: the example of docs/integrations.md
// metric succeeds on a healthy canary and fails on one erring at 50%.
func TestAnalysisFromDwaraWindows(t *testing.T) {
	build(t)
	dbURL := database(t)
	admin, proxy := freeAddr(t), freeAddr(t)
	start(t, "serve", "--database-url", dbURL, "--admin-listen", admin, "--listen", proxy)
	api := "http://" + admin
	var failing atomic.Bool
	var n atomic.Int64
	canary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() && n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(canary.Close)
	spec := fmt.Sprintf(`{"message": "analysis", "spec": {
	  "upstreams": [{"name": "stable", "endpoints": [%q]}, {"name": "canary", "endpoints": [%q]}],
	  "services": [{"name": "shop", "base_path": "/",
	    "split": {"targets": [{"upstream": "stable", "weight": 50}, {"upstream": "canary", "weight": 50}],
	      "canary_analysis": {"enabled": true, "window_seconds": 600, "step": 10, "min_requests": 1000000, "cooldown_seconds": 600,
	        "promote": {"metric": "error_rate", "threshold": 0.001}, "rollback": {"metric": "error_rate", "threshold": 0.9}}}}]}}`,
		pool(t, "stable"), strings.TrimPrefix(canary.URL, "http://"))
	eventually(t, "the API answers", func() bool {
		resp, err := http.Get(api + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	})
	resp, err := http.Post(api+"/api/v1/generations", "application/json", bytes.NewReader([]byte(spec)))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusCreated {
		t.Fatalf("publish: %d %s", resp.StatusCode, b)
	}
	resp.Body.Close()

	// The documented metric, as an AnalysisTemplate would give it.
	metric := v1alpha1.Metric{
		Name:             "dwara-canary-errors",
		SuccessCondition: "result < 0.05",
		Provider: v1alpha1.MetricProvider{Web: &v1alpha1.WebMetric{
			URL:      api + "/api/v1/canary",
			JSONPath: "{$.items[?(@.service=='shop')].canary_window.error_rate}",
		}},
	}
	run := func() v1alpha1.Measurement {
		t.Helper()
		client, err := webmetric.NewWebMetricHttpClient(metric)
		if err != nil {
			t.Fatal(err)
		}
		parser, err := webmetric.NewWebMetricJsonParser(metric)
		if err != nil {
			t.Fatal(err)
		}
		return webmetric.NewWebMetricProvider(*log.NewEntry(log.New()), client, parser).Run(&v1alpha1.AnalysisRun{}, metric)
	}
	// windowed waits until the fleet's window counts at least want canary
	// requests (the proxy flushes every second).
	windowed := func(want int64) {
		t.Helper()
		eventually(t, fmt.Sprintf("%d canary requests in the window", want), func() bool {
			for range 50 {
				r, err := http.Get("http://" + proxy + "/")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			}
			var list struct {
				Items []struct {
					Service      string  `json:"service"`
					PValue       float64 `json:"p_value"`
					CanaryWindow struct {
						Requests int64 `json:"requests"`
					} `json:"canary_window"`
				} `json:"items"`
			}
			r, err := http.Get(api + "/api/v1/canary")
			if err != nil {
				t.Fatal(err)
			}
			defer r.Body.Close()
			if err := json.NewDecoder(r.Body).Decode(&list); err != nil {
				t.Fatal(err)
			}
			return len(list.Items) == 1 && list.Items[0].CanaryWindow.Requests >= want
		})
	}
	windowed(50)
	if m := run(); m.Phase != v1alpha1.AnalysisPhaseSuccessful {
		t.Errorf("a healthy canary: %s (%s), value %s; want Successful", m.Phase, m.Message, m.Value)
	}
	failing.Store(true)
	windowed(1000)
	if m := run(); m.Phase != v1alpha1.AnalysisPhaseFailed {
		t.Errorf("a canary erring at half its requests: %s (%s), value %s; want Failed", m.Phase, m.Message, m.Value)
	}
}
