package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// h2loadOut is what h2load 1.52 prints (progress lines cut).
const h2loadOut = `starting benchmark...
spawning thread #0: 10 total client(s). Timing-based test with 0s of warm-up time and 10s of main duration for measurements.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2

finished in 10.00s, 8234.50 req/s, 534.92KB/s
requests: 82345 total, 82400 started, 82345 done, 82340 succeeded, 5 failed, 2 errored, 1 timeout
status codes: 82343 2xx, 0 3xx, 0 4xx, 3 5xx
traffic: 5.22MB (5477000) total, 454KB (465000) headers (space savings 93.17%), 2.97MB (3114000) data
                     min         max         mean         sd        +/- sd
time for request:      180us     65.10ms     18.08ms      1.24ms    92.00%
`

func TestParseH2Load(t *testing.T) {
	t.Parallel()
	// 200 requests taking 1..200 µs, out of order.
	var log strings.Builder
	for i := range 200 {
		us := (i*37)%200 + 1
		log.WriteString("1796174338616290\t200\t" + strconv.Itoa(us) + "\n")
	}
	got, err := parseH2Load([]byte(h2loadOut), strings.NewReader(log.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{
		Requests: 82345, Duration: 10 * time.Second, RPS: 8234.5,
		P50: 100 * time.Microsecond, P99: 198 * time.Microsecond, Max: 200 * time.Microsecond,
		Errors: 6, ErrStatus: 3, // 5 failed + 1 timeout; 5 failed - 2 errored answered
	}
	if got != want {
		t.Errorf("parseH2Load = %+v, want %+v", got, want)
	}

	ms := strings.Replace(h2loadOut, "finished in 10.00s", "finished in 850.25ms", 1)
	if got, err := parseH2Load([]byte(ms), strings.NewReader("1\t200\t5\n")); err != nil || got.Duration != 850250*time.Microsecond {
		t.Errorf("duration in ms: %v, %v", got.Duration, err)
	}

	bad := []struct{ name, out, log, want string }{
		{"h2c, not h2", strings.Replace(h2loadOut, "protocol: h2", "protocol: http/1.1", 1), "1\t200\t5\n", `negotiated "http/1.1", not h2`},
		{"no protocol", "starting benchmark...\nNo protocol negotiated. Aborted\n", "", "no application protocol"},
		{"no summary", "Application protocol: h2\n", "1\t200\t5\n", "no finished/requests lines"},
		{"empty log", h2loadOut, "", "no requests logged"},
		{"short log line", h2loadOut, "1\t200\n", "has 2 fields"},
		{"bad latency", h2loadOut, "1\t200\tfast\n", "line 1"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseH2Load([]byte(tt.out), strings.NewReader(tt.log))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestNearestRank(t *testing.T) {
	t.Parallel()
	xs := []int64{10, 20, 30, 40}
	for _, tt := range []struct {
		p    float64
		want int64
	}{{0.25, 10}, {0.5, 20}, {0.51, 30}, {0.99, 40}, {1, 40}, {0.01, 10}} {
		if got := nearestRank(xs, tt.p); got != tt.want {
			t.Errorf("nearestRank(%v, %v) = %d, want %d", xs, tt.p, got, tt.want)
		}
	}
	if got := nearestRank([]int64{7}, 0.99); got != 7 {
		t.Errorf("nearestRank of one = %d", got)
	}
}

func TestH2LoadThreads(t *testing.T) {
	t.Parallel()
	if got := (h2Load{Threads: 2, Clients: 1}).threads(); got != 1 {
		t.Errorf("threads with 1 client = %d, want 1 (h2load refuses -t over -c)", got)
	}
	if got := (h2Load{Threads: 2, Clients: 20}).threads(); got != 2 {
		t.Errorf("threads = %d, want 2", got)
	}
}
