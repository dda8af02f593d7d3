package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseTLSLoad: bench-tlsload's line gives wrk's figures, and a note
// when too few handshakes resumed; a line without the handshake counts
// is refused.
func TestParseTLSLoad(t *testing.T) {
	t.Parallel()
	out := []byte("WRKRESULT requests=6400 duration_us=5000000 rps=1280.0 p50_us=900 p99_us=4100 max_us=9000 errors=2 err_status=1 handshakes=6400 resumed=6336\n")
	r, err := parseTLSLoad(out, 64)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 6400 || r.RPS != 1280 || r.P50 != 900*time.Microsecond || r.P99 != 4100*time.Microsecond ||
		r.Duration != 5*time.Second || r.Errors != 2 || r.ErrStatus != 1 || r.Note != "" {
		t.Fatalf("parseTLSLoad = %+v", r)
	}
	// 3,168 of the 6,336 that could resume: half.
	r, err = parseTLSLoad([]byte(strings.Replace(string(out), "resumed=6336", "resumed=3168", 1)), 64)
	if err != nil || !strings.Contains(r.Note, "only 50% of the handshakes") {
		t.Fatalf("half resumed: note %q, %v", r.Note, err)
	}
	if _, err := parseTLSLoad([]byte(strings.Replace(string(out), " resumed=6336", "", 1)), 64); err == nil || !strings.Contains(err.Error(), "no resumed") {
		t.Fatalf("no resumed field: %v", err)
	}
	if _, err := parseWRK([]byte(strings.Replace(string(out), " handshakes=6400 resumed=6336", "", 1))); err != nil {
		t.Fatalf("wrk's own fields alone: %v", err)
	}
}

// TestResumeNote: the note's threshold is minResumedPercent of the
// handshakes after each client's first.
func TestResumeNote(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		clients            int
		handshakes, resume int64
		want               string
	}{
		{10, 110, 100, ""},
		{10, 110, 90, ""},
		{10, 110, 89, "only 89%"},
		{10, 110, 0, "only 0%"},
		{10, 10, 0, "none could resume"},
	} {
		if got := resumeNote(tt.clients, tt.handshakes, tt.resume); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("resumeNote(%d, %d, %d) = %q; want %q", tt.clients, tt.handshakes, tt.resume, got, tt.want)
		}
	}
}

// TestTLSLoadArgs: the load generator gets wrk's threads and connections,
// the run's duration, one request a connection and the run's certificate.
func TestTLSLoadArgs(t *testing.T) {
	t.Parallel()
	got := tlsLoad{Bin: "/b/bench-tlsload", Threads: 2, Clients: 64, CA: "/d/cert.pem"}.args("https://127.0.0.1:5/", 5*time.Second)
	want := []string{"/b/bench-tlsload", "-url", "https://127.0.0.1:5/", "-c", "64", "-t", "2", "-d", "5s", "-n", "1", "-ca", "/d/cert.pem"}
	if !slices.Equal(got, want) {
		t.Fatalf("args = %q, want %q", got, want)
	}
}
