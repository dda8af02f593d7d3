package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseKnobs(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	k, err := parseKnobs(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k.Rounds != 5 || k.Duration != 10*time.Second || k.Connections != 64 || k.Threads != 2 || k.CanaryPercent != 5 ||
		k.DwaraBin != "bin/dwara" || !slices.Equal(k.Contestants, contestantNames(false)) || k.ResultsTSV == "" || k.Deadline < 10*time.Minute ||
		len(k.Workloads) != 1 || k.Workloads[0].name != "get" || k.H2Clients != 20 || k.H2Streams != 10 {
		t.Errorf("defaults = %+v", k)
	}

	k, err = parseKnobs([]string{"-rounds", "2"}, env(map[string]string{
		"ROUNDS": "3", "DURATION": "4", "CONNECTIONS": "32", "CANARY_PERCENT": "10",
		"DWARA_BIN": "/x/dwara", "CONTESTANTS": "dwara, nginx", "SEED": "7", "RESULTS_TSV": "/r.tsv", "WARMUP": "0",
		"WORKLOADS": "h2,get16k", "H2_CLIENTS": "8", "H2_STREAMS": "4",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if k.Rounds != 2 {
		t.Errorf("flag -rounds 2 under ROUNDS=3: got %d", k.Rounds)
	}
	if k.Duration != 4*time.Second || k.Warmup != 0 || k.Connections != 32 || k.CanaryPercent != 10 || k.DwaraBin != "/x/dwara" ||
		k.Seed != 7 || k.ResultsTSV != "/r.tsv" || !slices.Equal(k.Contestants, []string{"nginx", "dwara"}) ||
		len(k.Workloads) != 2 || k.Workloads[0].name != "get16k" || k.Workloads[1].name != "h2" || k.H2Clients != 8 || k.H2Streams != 4 {
		t.Errorf("from the environment: %+v", k)
	}
	// The default deadline grows with the workloads: 2 rounds x 2 contestants x 2 workloads x (0+4+30 s).
	if want := 10*time.Minute + 8*34*time.Second; k.Deadline != want {
		t.Errorf("deadline = %s, want %s", k.Deadline, want)
	}
	// dwara-base runs the other binary, named in table order after dwara.
	k, err = parseKnobs(nil, env(map[string]string{"CONTESTANTS": "dwara-base,nginx,dwara", "DWARA_BASE_BIN": "/x/before"}), io.Discard)
	if err != nil || k.DwaraBaseBin != "/x/before" || !slices.Equal(k.Contestants, []string{"nginx", "dwara", "dwara-base"}) {
		t.Errorf("CONTESTANTS with dwara-base: %+v, %v", k, err)
	}
	k, err = parseKnobs([]string{"-workloads", "tls"}, env(map[string]string{"WORKLOADS": "h2"}), io.Discard)
	if err != nil || len(k.Workloads) != 1 || k.Workloads[0].name != "tls" {
		t.Errorf("flag -workloads tls under WORKLOADS=h2: %+v, %v", k.Workloads, err)
	}

	bad := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"unknown contestant", map[string]string{"CONTESTANTS": "nginx,envoy"}, nil, `unknown contestant "envoy"`},
		{"bad env value", map[string]string{"ROUNDS": "many"}, nil, `ROUNDS="many"`},
		{"fractional seconds", nil, []string{"-duration", "1.5s"}, "whole number of seconds"},
		{"percent out of range", map[string]string{"CANARY_PERCENT": "100"}, nil, "CANARY_PERCENT must be 1..99"},
		{"zero rounds", nil, []string{"-rounds", "0"}, "ROUNDS must be 1..100"},
		{"extra argument", nil, []string{"now"}, "unexpected arguments"},
		{"unknown workload", map[string]string{"WORKLOADS": "get,put"}, nil, `unknown workload "put"`},
		{"sticky is contestants", map[string]string{"WORKLOADS": "sticky"}, nil, "dwara-sticky and haproxy-sticky"},
		{"h2 clients", map[string]string{"H2_CLIENTS": "0"}, nil, "H2_CLIENTS must be 1..1000"},
		{"base without its binary", map[string]string{"CONTESTANTS": "dwara,dwara-base"}, nil, "dwara-base needs DWARA_BASE_BIN"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := parseKnobs(tt.args, env(tt.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
