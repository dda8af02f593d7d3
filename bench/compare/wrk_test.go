package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseWRK(t *testing.T) {
	t.Parallel()
	const good = `Running 10s test @ http://127.0.0.1:40001/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.10ms    1.20ms  40.00ms   80.00%
  182345 requests in 10.00s, 30.1MB read
Requests/sec:  18234.12
Transfer/sec:      3.01MB
WRKRESULT requests=182345 duration_us=10000123 rps=18234.1 p50_us=2950 p99_us=7480 max_us=40012 errors=2 err_status=1
`
	got, err := parseWRK([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{
		Requests: 182345, Duration: 10000123 * time.Microsecond, RPS: 18234.1,
		P50: 2950 * time.Microsecond, P99: 7480 * time.Microsecond, Max: 40012 * time.Microsecond,
		Errors: 2, ErrStatus: 1,
	}
	if got != want {
		t.Errorf("parseWRK = %+v, want %+v", got, want)
	}

	bad := []struct{ name, in, want string }{
		{"no result line", "Running 10s test\nunable to connect to 127.0.0.1:1 Connection refused\n", "no WRKRESULT line"},
		{"missing field", "WRKRESULT requests=1 duration_us=1 rps=1 p50_us=1 max_us=1 errors=0 err_status=0\n", "no p99_us"},
		{"not a number", "WRKRESULT requests=x duration_us=1 rps=1 p50_us=1 p99_us=1 max_us=1 errors=0 err_status=0\n", "requests"},
		{"not key=value", "WRKRESULT requests\n", "not key=value"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseWRK([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("parseWRK error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestWRKScriptMatchesParser keeps the Lua format and the parser in step.
func TestWRKScriptMatchesParser(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"requests=", "duration_us=", "rps=", "p50_us=", "p99_us=", "max_us=", "errors=", "err_status="} {
		if !strings.Contains(wrkReport, k) {
			t.Errorf("wrkReport does not print %s", k)
		}
	}
}
