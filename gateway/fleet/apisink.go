package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dwara/dwara/api/apiv1"
	"github.com/dwara/dwara/db"
)

// APIWindowSink is the WindowSink of a gateway that follows the control
// plane (`dwara gateway --control-plane`): it posts each flush to POST
// /api/v1/canary/windows of the API at URL, which writes the rows to
// canary_windows for the fleet's runner. It is safe for concurrent use.
type APIWindowSink struct {
	// URL is the base URL of the API, e.g. "http://127.0.0.1:9090".
	// Required.
	URL string
	// Token, when not "", is sent as "Authorization: Bearer <token>".
	Token string
	// Client makes the calls; nil means http.DefaultClient (each call is
	// bounded by the Flusher's context).
	Client *http.Client
}

// FlushCanaryWindows posts rows as instance's, in reports of at most
// apiv1.MaxCanaryWindowRows rows; any answer but a 2xx is an error, and
// the Flusher keeps the rows for its next flush (a report that was stored
// before a later one failed is then sent again: rows are rarely more than
// one report).
func (s *APIWindowSink) FlushCanaryWindows(ctx context.Context, instance string, rows []db.CanaryWindowRow) error {
	for len(rows) > 0 {
		n := min(len(rows), apiv1.MaxCanaryWindowRows)
		if err := s.post(ctx, instance, rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// post posts one report of at most apiv1.MaxCanaryWindowRows rows.
func (s *APIWindowSink) post(ctx context.Context, instance string, rows []db.CanaryWindowRow) error {
	report := apiv1.CanaryWindowReport{Instance: instance, Rows: make([]apiv1.CanaryWindowRow, len(rows))}
	for i, r := range rows {
		lat := r.Latency
		if lat == nil {
			lat = [][2]uint64{}
		}
		report.Rows[i] = apiv1.CanaryWindowRow{GenerationID: r.Generation, Service: r.Service, Version: r.Version,
			Requests: r.Requests, Errors: r.Errors, Latency: lat}
	}
	body, err := json.Marshal(report)
	if err != nil {
		return err
	}
	target := strings.TrimSuffix(s.URL, "/") + "/api/v1/canary/windows"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.Token)
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s: %s", target, resp.Status, bytes.TrimSpace(answer))
	}
	return nil
}
