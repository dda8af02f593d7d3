package httpfront

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dwara/dwara/gateway/proxy"
)

// deadlineRecorder is a response writer that records the write deadlines
// set on it, as net/http's writers offer them (proxy.Deadliner).
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	writes []time.Time
}

func (d *deadlineRecorder) SetReadDeadline(time.Time) error { return nil }

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.writes = append(d.writes, t)
	return nil
}

// TestWriteDeadlineWhereWritesWait: with a stall timeout, the client's
// write deadline is set only for an answer whose writes may wait for the
// client (a body past the server's buffer, or a streamed one), and lifted
// at its end; a body the server holds whole until the handler returns is
// written without one (on HTTP/2 each change is a message to the
// connection's goroutine and a timer). Every answer arrives whole.
func TestWriteDeadlineWhereWritesWait(t *testing.T) {
	t.Parallel()
	large := strings.Repeat("l", 64<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			_, _ = io.WriteString(w, "small")
		case "/edge":
			_, _ = io.WriteString(w, strings.Repeat("e", unflushedBody))
		case "/past":
			_, _ = io.WriteString(w, strings.Repeat("p", unflushedBody+1))
		case "/large":
			_, _ = io.WriteString(w, large)
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
		}
	}))
	t.Cleanup(up.Close)
	p := proxyTo(t, proxy.Options{ClientStallTimeout: time.Minute}, up)
	for _, tc := range []struct {
		path    string
		size    int
		armed   bool
		wantSub string
	}{
		{"/small", 5, false, "small"},
		{"/edge", unflushedBody, false, "eee"},
		{"/past", unflushedBody + 1, true, "ppp"},
		{"/large", len(large), true, "lll"},
		{"/stream", len("data: 1\n\n"), true, "data: 1"},
	} {
		rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
		Handler(p).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://web"+tc.path, nil))
		body := rec.Body.String()
		if rec.Code != http.StatusOK || len(body) != tc.size || !strings.Contains(body, tc.wantSub) {
			t.Fatalf("%s: %d, %d bytes; want 200 and %d bytes", tc.path, rec.Code, len(body), tc.size)
		}
		if !tc.armed {
			if len(rec.writes) != 0 {
				t.Errorf("%s: write deadlines %v; want none for a body the server holds whole", tc.path, rec.writes)
			}
			continue
		}
		if len(rec.writes) < 2 || rec.writes[0].IsZero() || !rec.writes[len(rec.writes)-1].IsZero() {
			t.Errorf("%s: write deadlines %v; want one set before the writes and lifted (zero) last", tc.path, rec.writes)
		}
	}
}
